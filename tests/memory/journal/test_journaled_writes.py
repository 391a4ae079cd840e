"""A write is acknowledged once the journal holds it: read back at once, folded into the table by the flusher,
exactly once whatever interrupts it, and refused (nothing written) only when the journal cannot take it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.memory.errors import JournalFull
from app.memory.service import MemoryService
from app.memory.store.locks import LOCK_DIR_NAME
from tests.conftest import SettingsFactory
from tests.mcp.clients import poll_until
from tests.support.server import run_server, spawn_server


@asynccontextmanager
async def plugin_holds_the_lock(db: Path) -> AsyncIterator[None]:
    """memory-lancedb-pro's write lock (proper-lockfile's directory), taken between our flushes and held."""
    while True:
        try:
            os.mkdir(db / LOCK_DIR_NAME)
            break
        except FileExistsError:
            await asyncio.sleep(0.01)  # proper-lockfile's retry, shortened
    try:
        yield
    finally:
        os.rmdir(db / LOCK_DIR_NAME)


def table_ids(service: MemoryService) -> list[str]:
    return [str(i) for i in service.store.scan(None, ["id"]).column("id").to_pylist()]


async def test_every_read_sees_an_acknowledged_write_before_it_reaches_the_table(
        make_settings: SettingsFactory, tmp_path: Path) -> None:
    async with MemoryService.open(make_settings(lock_timeout_s=60)) as service:
        old = (await service.remember("the release train leaves on thursdays", tags=["decision"])).memory_id
        await service.writer.flush()
        async with plugin_holds_the_lock(tmp_path / "lancedb"):
            new = (await service.remember("the release train leaves on fridays", tags=["decision"],
                                          supersedes=old)).memory_id
            await service.update(old, importance=0.2)
            gone = (await service.remember("a note forgotten at once")).memory_id
            await service.forget(gone)
            recalled = await service.recall("when does the release train leave", include_superseded=True)
            listed = await service.list_memories(category="decision")
            by_tag = await service.list_facts(tag="decision")
            stats = await service.stats()
            got = await service.get(new)
            keyword = await service.keyword_search("fridays")
            assert table_ids(service) == [old] and service.writer.depth == 5
        await service.writer.flush()
        assert sorted(table_ids(service)) == sorted([old, new]) and service.writer.depth == 0
        after = await service.recall("when does the release train leave", include_superseded=True)
    assert {h.id: h.superseded_by for h in recalled.hits} == {new: None, old: new}
    assert [(h.id, h.superseded_by) for h in after.hits] == [(h.id, h.superseded_by) for h in recalled.hits]
    assert sorted(m.id for m in listed) == sorted(m.id for m in by_tag) == sorted([old, new])
    assert {m.id: m.importance for m in listed}[old] == pytest.approx(0.2)
    assert stats.total == 2 and stats.categories == {"decision": 2}
    assert got.supersedes == old and [h.id for h in keyword] == [new]


async def test_reads_during_flushes_see_every_row_exactly_once(make_settings: SettingsFactory) -> None:
    async with MemoryService.open(make_settings(flush_interval_s=0.01)) as service:
        acknowledged: list[str] = []
        for round_ in range(15):
            acknowledged += [(await service.remember(f"round {round_} note {i} about gardens")).memory_id
                             for i in range(4)]
            flushing = asyncio.create_task(service.writer.flush())
            while not flushing.done():
                listed = [m.id for m in await service.list_memories(limit=200)]
                assert sorted(listed) == sorted(acknowledged)  # none missing, none twice, mid-flush
                hits = await service.recall("note about gardens", top_k=50)
                assert len({h.id for h in hits.hits}) == len(hits.hits) == min(50, len(acknowledged))
            await flushing
        assert sorted(table_ids(service)) == sorted(acknowledged)


async def test_a_flush_interrupted_after_its_commit_is_redone_without_doubling_a_row(
        make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    # The flusher's own loop may run a round at any time: whichever round records a flush first fails.
    async with MemoryService.open(make_settings(flush_interval_s=60)) as service:
        first = [(await service.remember(f"batch one {i}")).memory_id for i in range(3)]
        await service.writer.flush()
        journal = service.writer.journal
        record = journal.mark_flushed
        failed = threading.Event()

        def crash_once(marker: Any) -> None:
            if not failed.is_set():
                failed.set()
                raise OSError("the process died here: committed to the table, not recorded in the journal")
            record(marker)

        monkeypatch.setattr(journal, "mark_flushed", crash_once)
        second = [(await service.remember(f"batch two {i}")).memory_id for i in range(3)]
        await service.update(first[0], text="batch one 0, rewritten")
        await service.forget(first[1])
        with contextlib.suppress(OSError):  # this round failed, or the loop's did and this one redid it
            await service.writer.flusher.flush_now()
        assert failed.is_set()
        assert sorted(table_ids(service)) == sorted(first[:1] + first[2:] + second)  # the commit landed
        await service.writer.flush()  # the next round redoes what was not recorded
        ids = table_ids(service)
        rows = {r["id"]: r for r in service.store.get_rows(ids)}
        assert service.writer.overlay.unflushed == 0
    assert len(ids) == len(set(ids)) == 5
    assert sorted(ids) == sorted(first[:1] + first[2:] + second)
    assert rows[first[0]]["text"] == "batch one 0, rewritten"


async def test_past_the_journal_bound_writes_are_refused_and_nothing_is_written(
        make_settings: SettingsFactory, tmp_path: Path) -> None:
    async with MemoryService.open(make_settings(journal_max_rows=3, lock_timeout_s=60)) as service:
        async with plugin_holds_the_lock(tmp_path / "lancedb"):
            kept = [(await service.remember(f"waiting row {i}")).memory_id for i in range(3)]
            with pytest.raises(JournalFull) as refused:
                await service.remember("one too many")
            assert refused.value.retry_after_s and "MEMORY_MCP_JOURNAL_MAX_ROWS=3" in refused.value.message
            assert sorted(m.id for m in await service.list_memories()) == sorted(kept)
        await service.writer.flush()
        assert (await service.remember("room again")).memory_id
        assert len(await service.list_memories()) == 4


async def test_a_journal_that_cannot_write_answers_503_and_writes_nothing(make_settings: SettingsFactory) -> None:
    with run_server(make_settings()) as server:
        async with httpx.AsyncClient(base_url=f"{server.url}/api/lancedb", timeout=30) as http:
            assert (await http.post("/memories", json={"text": "before the disk filled"})).status_code == 200
            journal = server.app.state.services.memory.writer.journal
            with journal._lock:
                pages = journal._db.execute("PRAGMA page_count").fetchone()[0]
                journal._db.execute(f"PRAGMA max_page_count = {pages}")  # SQLite's "database or disk is full"
            refused = await http.post("/memories", json={"text": "x" * 7000})
            listed = (await http.get("/memories")).json()
    assert refused.status_code == 503 and refused.json()["code"] == "journal_unavailable"
    assert int(refused.headers["Retry-After"]) >= 1
    assert [m["text"] for m in listed] == ["before the disk filled"]


async def test_two_servers_on_one_directory_share_the_journal_and_store_each_write_once(
        make_settings: SettingsFactory) -> None:
    settings = make_settings()
    with run_server(settings) as first, run_server(settings) as second:
        async with httpx.AsyncClient(timeout=30) as http:
            posted = [await http.post(f"{server.url}/api/lancedb/memories", json={"text": f"shared note {i}"})
                      for i, server in enumerate([first, second] * 5)]
            ids = [response.json()["id"] for response in posted]
            for server in (first, second):
                listed = await poll_until(lambda server=server: http.get(f"{server.url}/api/lancedb/memories"),  # type: ignore[misc]
                                          lambda r: sorted(m["id"] for m in r.json()) == sorted(ids), within_s=2)
                assert listed.status_code == 200
            for server in (first, second):
                await server.on_server_loop(server.app.state.services.memory.writer.flush())
        stored = first.app.state.services.memory.store.scan(None, ["id"]).column("id").to_pylist()
    assert sorted(stored) == sorted(ids)


async def test_kill_9_mid_flush_loses_and_doubles_nothing_after_a_restart(make_settings: SettingsFactory,
                                                                        tmp_path: Path) -> None:
    make_settings()
    failpoints = tmp_path / "failpoints"
    failpoints.mkdir()
    env = {"MEMORY_MCP_DB_PATH": str(tmp_path / "lancedb"), "MEMORY_MCP_KANBAN_DB": str(tmp_path / "k.sqlite3"),
           "MEMORY_MCP_EMBEDDING_PROVIDER": "hash", "MEMORY_MCP_TEST_FAILPOINTS_DIR": str(failpoints),
           "MEMORY_MCP_OPENCLAW_CONFIG": "", "MEMORY_MCP_FLUSH_INTERVAL_S": "2"}
    with spawn_server(env, log_path=tmp_path / "first.log") as server:
        async with httpx.AsyncClient(base_url=f"{server.url}/api/lancedb", timeout=30) as http:
            ids = [(await http.post("/memories", json={"text": f"acknowledged {i}"})).json()["id"] for i in range(20)]
            (failpoints / "flush_committed").touch()  # the next flush dies after its commit, before its record
            assert await asyncio.to_thread(server.process.wait, 60) == 137
    (failpoints / "flush_committed").unlink()
    with spawn_server(env, log_path=tmp_path / "second.log") as server:
        async with httpx.AsyncClient(base_url=f"{server.url}/api/lancedb", timeout=30) as http:
            listed = [m["id"] for m in (await http.get("/memories", params={"limit": 100})).json()]
            journal = await poll_until(lambda: http.get(f"{server.url}/readyz"),
                                       lambda r: r.json()["memory"]["journal"]["depth"] == 0, within_s=30)
            assert journal.status_code == 200
    import lancedb

    stored = lancedb.connect(str(tmp_path / "lancedb")).open_table("memories").to_arrow().column("id").to_pylist()
    assert sorted(listed) == sorted(ids)
    assert sorted(stored) == sorted(ids)  # in the table once: the redone flush rewrote, never appended again
