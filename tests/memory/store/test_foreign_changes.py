"""Whatever another process does to the table, the store neither corrupts it nor wedges: each case
recovers by itself while the service runs, with one log line saying what happened."""

from __future__ import annotations

import json
import logging
import time
import uuid
from datetime import timedelta
from typing import Any

import lancedb
import pytest

from app.memory.service import MemoryService
from app.memory.store import diagnostics
from tests.support.catch_up import caught_up_async


def _other_process_table(service: MemoryService) -> Any:
    db = lancedb.connect(str(service.settings.db_path), read_consistency_interval=timedelta(0))
    return db, db.open_table(service.settings.table)


async def _rows(service: MemoryService, texts: list[str], memory_id: str | None = None) -> list[dict[str, Any]]:
    vectors = await service.embedder.embed_documents(texts)
    return [{"id": memory_id or str(uuid.uuid4()), "text": text, "vector": vector, "scope": "global",
             "category": "fact", "importance": 0.5, "timestamp": int(time.time() * 1000),
             "metadata": json.dumps({"source": "memory-lancedb-pro"})} for text, vector in zip(texts, vectors,
                                                                                                strict=True)]


def _all_rows_readable(service: MemoryService) -> list[str]:
    """Every row of a fresh connection, data files included (a dropped table's files would be missing)."""
    table = lancedb.connect(str(service.settings.db_path)).open_table(service.settings.table)
    return sorted(table.to_arrow()["text"].to_pylist())


@pytest.mark.parametrize("their_commits", [1, 12])  # fewer versions than ours, and more
async def test_a_table_dropped_and_created_again_is_followed_and_never_corrupted(
        service: MemoryService, caplog: pytest.LogCaptureFixture, their_commits: int) -> None:
    for i in range(6):
        await service.remember(f"old table memory {i}")
    await service.writer.flush()  # in the table the other process drops
    assert len((await service.recall("old table memory", top_k=10)).hits) == 6
    db, table = _other_process_table(service)
    schema = table.schema
    db.drop_table(service.settings.table)
    fresh = db.create_table(service.settings.table, schema=schema)
    for i in range(their_commits):
        fresh.add(await _rows(service, [f"new table memory {i}"]))

    with caplog.at_level(logging.WARNING):
        hits = (await service.recall("table memory", top_k=50)).hits
        result = await service.remember("written after the table came back")
        await service.writer.flush()
    assert {h.text for h in hits} == {f"new table memory {i}" for i in range(their_commits)}
    assert sum("is a new table" in r.getMessage() for r in caplog.records) == 1
    expected = sorted([*(f"new table memory {i}" for i in range(their_commits)), "written after the table came back"])
    assert _all_rows_readable(service) == expected
    assert (await service.get(result.memory_id)).text == "written after the table came back"
    listed = await service.list_memories(limit=50)
    assert sorted(m.text for m in listed) == expected


async def test_a_dropped_table_is_created_again_by_the_next_flush(service: MemoryService) -> None:
    await service.remember("before the drop")
    await service.writer.flush()
    db, _ = _other_process_table(service)
    db.drop_table(service.settings.table)
    result = await service.remember("after the drop")
    await service.writer.flush()
    assert _all_rows_readable(service) == ["after the drop"]
    assert [h.id for h in (await service.recall("after the drop")).hits] == [result.memory_id]


async def test_a_drop_that_leaves_the_version_directory_behind_is_still_a_drop(service: MemoryService) -> None:
    # A drop racing another writer's first file can leave the directories without a manifest: a commit
    # through the dropped table's handle would write a version that names its deleted data files.
    await service.remember("before the drop")
    await service.writer.flush()
    db, _ = _other_process_table(service)
    db.drop_table(service.settings.table)
    (service.settings.db_path / f"{service.settings.table}.lance" / "_versions").mkdir(parents=True)
    result = await service.remember("after the drop")
    await service.writer.flush()
    assert _all_rows_readable(service) == ["after the drop"]
    assert [h.id for h in (await service.recall("after the drop")).hits] == [result.memory_id]


async def test_a_column_another_writer_adds_never_stops_appends(service: MemoryService) -> None:
    await service.remember("before the column")
    await service.writer.flush()
    _, table = _other_process_table(service)
    table.add_columns({"flag": "'x'"})  # LanceDB makes such a column non-nullable
    assert not table.schema.field("flag").nullable
    result = await service.remember("after the column")
    await service.writer.flush()
    rows = {r["text"]: r for r in table.to_arrow().to_pylist()}
    assert rows["before the column"]["flag"] == "x" and rows["after the column"]["flag"] == ""
    assert (await service.recall("after the column")).hits[0].id == result.memory_id


async def test_overwrite_and_restore_by_another_process_are_followed(service: MemoryService) -> None:
    for i in range(4):
        await service.remember(f"kept memory {i}")
    await service.writer.flush()
    _, table = _other_process_table(service)
    version = table.version
    table.add(await _rows(service, ["overwritten memory"]), mode="overwrite")
    assert await caught_up_async(service.store)
    assert [h.text for h in (await service.recall("memory", top_k=10)).hits] == ["overwritten memory"]
    table.restore(version)
    assert await caught_up_async(service.store)
    assert sorted(h.text for h in (await service.recall("memory", top_k=10)).hits) == [
        f"kept memory {i}" for i in range(4)]
    await service.remember("after the restore")
    await service.writer.flush()
    assert len(_all_rows_readable(service)) == 5


async def test_duplicate_ids_from_another_writer_stay_visible_and_doctor_reports_them(
        service: MemoryService) -> None:
    await service.remember("ours")
    await service.writer.flush()
    _, table = _other_process_table(service)
    table.add(await _rows(service, ["first copy of a twin", "second copy of a twin"], memory_id="twin-id"))
    assert await caught_up_async(service.store)
    hits = (await service.recall("copy of a twin", top_k=10)).hits
    assert sorted(h.text for h in hits if h.id == "twin-id") == ["first copy of a twin", "second copy of a twin"]
    assert service.store.cache is not None and service.store.cache.version == service.store.version()
    check = diagnostics.check_rows(table)
    assert check.status == "warn" and "1 ids are stored more than once (twin-id)" in check.detail
