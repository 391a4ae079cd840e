"""Writes never wait on a commit: not on a compaction (it runs in the housekeeping thread), not on the
plugin's write lock. They are acknowledged once the journal holds them and reach the table after."""

from __future__ import annotations

import asyncio
import errno
import fcntl
import os
import threading
import time
from pathlib import Path

import anyio
import httpx
import pytest

from app.memory.service import MemoryService
from app.memory.store.locks import FLOCK_NAME, LOCK_DIR_NAME
from tests.conftest import SettingsFactory
from tests.support.s3 import Bucket
from tests.support.server import run_server


def _hold_rewrites(service: MemoryService) -> tuple[threading.Event, threading.Event, list[str]]:
    """Make the housekeeping thread stop before each rewrite until ``release`` is set."""
    entered, release = threading.Event(), threading.Event()
    kinds: list[str] = []

    def hold(kind: str) -> None:
        kinds.append(kind)
        entered.set()
        assert release.wait(60), "the test never released the rewrite"

    service.writer.housekeeper.before_rewrite = hold
    return entered, release, kinds


async def _remember_while_a_compaction_is_held(service: MemoryService) -> list[str]:
    entered, release, kinds = _hold_rewrites(service)
    try:
        ids = []
        for i in range(2):
            ids.append((await service.remember(f"before the compaction {i}")).memory_id)
            await service.writer.flush()  # one commit each
        with anyio.fail_after(60):
            await asyncio.to_thread(entered.wait)  # the second commit asked for a compaction: it is held
        assert kinds == ["compact"]
        with anyio.fail_after(60):  # acknowledged, and read back, while the compaction has not finished
            ids += [(await service.remember(f"while compacting {i}")).memory_id for i in range(5)]
            assert sorted(m.id for m in await service.list_memories(limit=50)) == sorted(ids)
        assert service.writer.compactions == 0
    finally:
        release.set()
    assert await service.writer.housekeeping_idle()
    assert service.writer.compactions >= 1
    await service.writer.flush()
    return ids


async def test_remembers_are_acknowledged_while_a_compaction_runs_on_a_local_table(
        make_settings: SettingsFactory) -> None:
    async with MemoryService.open(make_settings(compact_every_commits=2)) as service:
        ids = await _remember_while_a_compaction_is_held(service)
        listed = await service.list_memories(limit=50)
        assert sorted(m.id for m in listed) == sorted(ids)
        assert service.store.count() == 7


async def test_remembers_are_acknowledged_while_the_lease_holder_compacts_on_object_storage(
        make_settings: SettingsFactory, s3_bucket: Bucket) -> None:
    settings = make_settings(db_path=s3_bucket.uri(), storage_options=s3_bucket.s3.storage_options(),
                             compact_every_commits=2)
    async with MemoryService.open(settings) as service:
        ids = await _remember_while_a_compaction_is_held(service)
        for i in range(3):  # the cache takes in its own instance's compaction like another's
            ids.append((await service.remember(f"after the compaction {i}")).memory_id)
        await service.writer.flush()
        listed = await service.list_memories(limit=50)
        assert sorted(m.id for m in listed) == sorted(ids)
        assert service.store.count() == len(ids) == 10


def _flock_held(db: Path) -> bool:
    """Whether some open file (the writer's) holds the commit flock, without taking it for long."""
    fd = os.open(db / FLOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return True
        raise
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


async def _until(condition: object, within_s: float = 30.0) -> None:
    deadline = time.monotonic() + within_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def _take_plugin_lock(db: Path) -> None:
    """Take the write lock as memory-lancedb-pro does (mkdir, retried while another writer holds it)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            os.mkdir(db / LOCK_DIR_NAME)
            return
        except FileExistsError:
            assert time.monotonic() < deadline, "the lock was never free"
            await asyncio.sleep(0.01)  # proper-lockfile's retry, shortened


async def test_writes_while_the_plugin_holds_its_lock_are_acknowledged_at_once_and_land_after(
        make_settings: SettingsFactory, tmp_path: Path) -> None:
    settings = make_settings(lock_timeout_s=60)
    db = tmp_path / "lancedb"
    with run_server(settings) as server:
        async with httpx.AsyncClient(base_url=server.url + "/api/lancedb", timeout=60) as http:
            kept = (await http.post("/memories", json={"text": "a memory that will be deleted"})).json()["id"]
            await _take_plugin_lock(db)  # memory-lancedb-pro holds the write lock
            try:
                started = time.monotonic()
                answers = [await http.post("/memories", json={"text": f"written while the plugin writes {i}"})
                           for i in range(5)]
                deleted = await http.delete(f"/memories/{kept}")
                waited = time.monotonic() - started
                listed = (await http.get("/memories", params={"limit": 10})).json()
                await _until(lambda: _flock_held(db))  # the flusher waits for the plugin's lock meanwhile
                assert server.app.state.services.memory.store.count() <= 1  # nothing of them in the table yet
            finally:
                os.rmdir(db / LOCK_DIR_NAME)
            assert [a.status_code for a in answers] == [200] * 5 and deleted.status_code == 200
            assert waited < 5  # no commit waited on: the plugin's lock did not hold them up
            assert sorted(m["text"] for m in listed) == sorted(f"written while the plugin writes {i}" for i in range(5))
            service = server.app.state.services.memory
            await server.on_server_loop(service.writer.flush())
            rows = service.store.scan(None, ["id", "text"]).to_pylist()
    assert sorted(row["text"] for row in rows) == sorted(f"written while the plugin writes {i}" for i in range(5))


@pytest.mark.parametrize("kind", ["update", "delete"])
async def test_an_update_or_forget_journaled_behind_the_plugins_lock_is_read_back_at_once(
        make_settings: SettingsFactory, tmp_path: Path, kind: str) -> None:
    db = tmp_path / "lancedb"
    async with MemoryService.open(make_settings(lock_timeout_s=60)) as service:
        kept = (await service.remember("a memory that changes")).memory_id
        await service.writer.flush()
        await _take_plugin_lock(db)
        try:
            if kind == "delete":
                await service.forget(kept)
            else:
                await service.update(kept, importance=0.1)
            seen = await service.list_memories(limit=10)
            in_table = {row["id"]: row for row in service.store.scan(None, ["id", "importance"]).to_pylist()}
        finally:
            os.rmdir(db / LOCK_DIR_NAME)
        assert in_table[kept]["importance"] == pytest.approx(0.7)  # the table has not changed yet
        await service.writer.flush()
        rows = {row["id"]: row for row in service.store.scan(None, ["id", "importance"]).to_pylist()}
    if kind == "delete":
        assert seen == [] and kept not in rows
    else:
        assert [m.importance for m in seen] == [pytest.approx(0.1)] and rows[kept]["importance"] == pytest.approx(0.1)
