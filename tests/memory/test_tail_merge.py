"""Merging the newest fragments: fewer fragments, the same rows, and other writers' changes kept."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import pytest

from app.memory import writer as writer_module
from app.memory.service import MemoryService
from app.memory.store import Store
from tests.conftest import SettingsFactory


def _fragments(store: Store) -> int:
    return int(store.table.stats()["fragment_stats"]["num_fragments"])


def _rows(store: Store) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = store.table.to_arrow().sort_by("id").to_pylist()
    return rows


async def test_a_tail_merge_leaves_one_fragment_for_the_tail_and_the_same_rows(make_settings: SettingsFactory) -> None:
    async with MemoryService.open(make_settings(compact_every_commits=1000)) as service:
        for i in range(12):
            await service.remember(f"tail memory number {i} about topic {i * 7}")
        store = service.store
        before_rows, before_fragments = _rows(store), _fragments(store)
        merged = await asyncio.to_thread(store.merge_tail, 12)
        assert merged == 12
        assert before_fragments == 12 and _fragments(store) == 1
        assert _rows(store) == before_rows  # vectors included, bit for bit
        assert store.cache is not None and store.cache.version == store.version()  # no reload needed
        hits = await service.recall("tail memory number 5 about topic 35", top_k=1)
        assert hits.hits[0].text == "tail memory number 5 about topic 35"


async def test_a_row_another_writer_changes_while_the_tail_is_merged_keeps_that_change(
        make_settings: SettingsFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with MemoryService.open(make_settings(compact_every_commits=1000)) as service:
        ids = [(await service.remember(f"shared memory {i}")).memory_id for i in range(4)]
        store = service.store
        other = lancedb.connect(str(tmp_path / "lancedb")).open_table("memories")
        read_tail = store.table.take_offsets

        def take_then_race(offsets: list[int]) -> Any:
            taken = read_tail(offsets).to_arrow()
            # Another process (no lock) changes one row's text and another's vector after the read.
            other.update(where=f"id = '{ids[1]}'", values={"text": "edited elsewhere"})
            other.update(where=f"id = '{ids[2]}'", values={"vector": np.full(store.cache.dimension, 0.5).tolist()})

            class Taken:
                def to_arrow(self) -> Any:
                    return taken
            return Taken()

        monkeypatch.setattr(store.table, "take_offsets", take_then_race)
        await asyncio.to_thread(store.merge_tail, 4)
        rows = {row["id"]: row for row in _rows(store)}
    assert rows[ids[1]]["text"] == "edited elsewhere"
    assert rows[ids[2]]["vector"] == pytest.approx([0.5] * len(rows[ids[2]]["vector"]))
    assert rows[ids[0]]["text"] == "shared memory 0" and len(rows) == 4


async def test_the_writer_merges_the_tail_every_few_commits_between_compactions(
        make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writer_module, "TAIL_MERGE_COMMITS", 4)
    async with MemoryService.open(make_settings(compact_every_commits=1000)) as service:
        for i in range(10):
            await service.remember(f"sequential memory {i}")
        assert service.writer.tail_merges == 2 and service.writer.compactions == 0
        assert _fragments(service.store) <= 4  # 10 commits: 2 merged tails + 2 new fragments
        assert service.store.count() == 10
        assert len(await service.list_memories(limit=50)) == 10
