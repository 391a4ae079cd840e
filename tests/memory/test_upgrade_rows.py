"""``memory-mcp upgrade-rows``: rows earlier versions wrote get memory-lancedb-pro's smart metadata, nothing else
changes (a real LanceDB table in tmp_path, and the command in this process)."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import lancedb
import numpy as np
import pytest

from app.cli import main
from app.memory import smart_metadata
from app.memory.embeddings.hashing import HashEmbedder
from app.memory.rows import new_row
from app.memory.store import diagnostics
from app.memory.store.table import Store
from app.memory.upgrade_rows import check, upgrade_rows
from app.settings import Settings
from tests.conftest import SettingsFactory

EARLIER = {"created": "2026-01-02T03:04:05.000Z", "agent": "codex", "embedding_model": "hash-bow-v1",
           "source": "memory-mcp"}


def table_rows(settings: Settings) -> dict[str, dict[str, Any]]:
    db = lancedb.connect(str(settings.db_path), read_consistency_interval=timedelta(0))
    return {row["id"]: row for row in db.open_table(settings.table).to_arrow().to_pylist()}


def mixed_table(settings: Settings) -> dict[str, str]:
    """Rows as each writer leaves them: an earlier memory-mcp (tags in the metadata, or joined by commas in
    the column, as the first versions kept them), today's memory-mcp, the plugin's own legacy row and its
    reflection row. Returns their ids by kind."""
    embedder = HashEmbedder()
    texts = ["deploys run on Fridays. Never on Mondays.", "alice prefers tabs", "the cache warms at boot",
             "postgres listens on 5433", "a reflection on the week"]
    vectors = asyncio.run(embedder.embed_documents(texts))
    rows = [new_row(text, vector, "global", [], 0.7, None, embedder.model) for text, vector in zip(texts, vectors,
                                                                                                     strict=True)]
    rows[0] |= {"category": "decision", "metadata": json.dumps({**EARLIER, "tags": ["decision", "ops"]})}
    rows[1] |= {"category": "preference,team", "metadata": json.dumps(EARLIER)}
    rows[3] |= {"category": "fact", "metadata": json.dumps({"l0": "the plugin's own legacy row"})}
    rows[4] |= {"category": "reflection", "metadata": "{}"}
    Store.open(settings, embedder).add(rows)
    return dict(zip(("earlier", "first", "current", "foreign", "reflection"), (r["id"] for r in rows), strict=True))


def test_rows_earlier_versions_wrote_get_the_smart_metadata_and_nothing_else_changes(
        make_settings: SettingsFactory) -> None:
    settings = make_settings()
    ids = mixed_table(settings)
    before = table_rows(settings)

    assert check(make_settings(table="nothing_here")) is None
    before_check = check(settings)
    assert before_check is not None and before_check.status == "warn"
    assert before_check.detail.startswith("2 rows an earlier memory-mcp wrote") and "upgrade-rows" in (
        before_check.fix or "")
    counted = upgrade_rows(settings, dry_run=True)
    assert (counted.rows, counted.legacy_ours, counted.legacy_foreign, counted.upgraded) == (5, 2, 1, 0)
    assert table_rows(settings) == before

    report = upgrade_rows(settings, batch_size=1)
    after = table_rows(settings)
    assert (report.legacy_ours, report.upgraded) == (2, 2)
    for memory_id, row in after.items():  # text, vector, every column but the metadata: bit-exact
        assert {k: v for k, v in row.items() if k != "metadata"} == {
            k: v for k, v in before[memory_id].items() if k != "metadata"}
    earlier = json.loads(after[ids["earlier"]]["metadata"])
    assert earlier == {**EARLIER, "tags": ["decision", "ops"], "source": "manual", "origin": "memory-mcp",
                       **smart_metadata.texts("deploys run on Fridays. Never on Mondays."),
                       "memory_category": "events", "tier": "working", "confidence": 0.7, "access_count": 0,
                       "last_accessed_at": before[ids["earlier"]]["timestamp"],
                       "valid_from": before[ids["earlier"]]["timestamp"], "state": "confirmed",
                       "memory_layer": "durable", "injected_count": 0, "bad_recall_count": 0,
                       "suppressed_until_turn": 0}
    assert json.loads(after[ids["first"]]["metadata"])["memory_category"] == "preferences"  # from its column's tags
    for kind in ("current", "foreign", "reflection"):
        assert after[ids[kind]]["metadata"] == before[ids[kind]]["metadata"], kind
    assert not any(smart_metadata.is_legacy(row["category"], json.loads(row["metadata"]))
                   for memory_id, row in after.items() if memory_id != ids["foreign"])

    assert check(settings) == diagnostics.Check(
        name="row_format", status="ok", detail="memory-mcp's rows are in memory-lancedb-pro's current format")
    db = lancedb.connect(str(settings.db_path))
    version = db.open_table(settings.table).version
    again = upgrade_rows(settings)
    assert (again.legacy_ours, again.upgraded) == (0, 0) and db.open_table(settings.table).version == version
    vectors = {i: np.asarray(r["vector"]) for i, r in table_rows(settings).items()}
    assert all(np.array_equal(vectors[i], np.asarray(before[i]["vector"])) for i in ids.values())


def test_upgrade_rows_command_counts_then_upgrades(make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    settings = make_settings()
    mixed_table(settings)
    monkeypatch.setenv("MEMORY_MCP_DB_PATH", str(settings.db_path))

    def run(*words: str) -> tuple[int, str, str]:
        code = main(list(words))
        out = capsys.readouterr()
        return code, out.out, out.err

    dry, done, missing = run("upgrade-rows", "--dry-run"), run("upgrade-rows", "--json"), \
        run("upgrade-rows", "--table", "nothing_here")
    assert dry[0] == 0 and "would upgrade 2 of 5 rows" in dry[1]
    assert "1 legacy rows memory-mcp did not write are left to the plugin" in dry[2]
    assert done[0] == 0 and json.loads(done[1])["upgraded"] == 2
    assert missing[0] == 2 and "no table 'nothing_here'" in missing[2]
