"""``doctor``'s row check finds what other writers may leave behind: second timestamps, zero vectors."""

from __future__ import annotations

from pathlib import Path

import lancedb
import numpy as np

from app.memory.embeddings.hashing import HashEmbedder
from app.memory.store import diagnostics
from app.memory.store.schema import build_schema

DIM = 16


def _table(tmp_path: Path, rows: list[dict[str, object]]) -> object:
    db = lancedb.connect(str(tmp_path))
    table = db.create_table("memories", schema=build_schema(HashEmbedder(DIM)))
    table.add(rows)
    return table


def _row(memory_id: str, timestamp: int, vector: list[float]) -> dict[str, object]:
    return {"id": memory_id, "text": memory_id, "vector": vector, "scope": "global", "category": "",
            "importance": 0.7, "timestamp": timestamp, "metadata": "{}"}


def test_rows_in_seconds_and_without_a_direction_are_counted_with_a_fix(tmp_path: Path) -> None:
    unit = list(np.eye(DIM, dtype=np.float32)[0])
    table = _table(tmp_path, [
        _row("good", 1_733_000_000_000, unit),
        _row("secs", 1_733_000_000, unit),
        _row("zero", 1_733_000_000_000, [0.0] * DIM),
    ])
    check = diagnostics.check_rows(table)
    assert check.status == "warn"
    assert "1 rows have a timestamp in seconds" in check.detail
    assert "1 rows have a zero, missing or non-finite vector" in check.detail
    assert check.fix and "milliseconds" not in check.fix and "ms" in check.fix


def test_a_clean_table_passes_the_row_check(tmp_path: Path) -> None:
    table = _table(tmp_path, [_row(f"m{i}", 1_733_000_000_000 + i, list(np.eye(DIM, dtype=np.float32)[i]))
                              for i in range(5)])
    check = diagnostics.check_rows(table)
    assert check.status == "ok" and "5 rows" in check.detail


def test_the_row_check_reads_a_sample_unless_asked_for_every_row(tmp_path: Path) -> None:
    unit = list(np.eye(DIM, dtype=np.float32)[0])
    rows = [_row(f"m{i}", 1_733_000_000_000 + i, unit) for i in range(30)] + [_row("m0", 1_733_000_000_000, unit)]
    table = _table(tmp_path, rows)
    sampled = diagnostics.check_rows(table, sample=10)
    assert sampled.status == "ok" and "the first 10 of 31 rows (`doctor --full` reads all)" in sampled.detail
    full = diagnostics.check_rows(table, sample=None)
    assert full.status == "warn" and "1 ids are stored more than once (m0)" in full.detail
