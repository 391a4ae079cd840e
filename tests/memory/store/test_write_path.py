"""Writes never wait on compaction (it runs in the housekeeping thread), and a write past its deadline
answers 503 store_busy with Retry-After instead of waiting minutes."""

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
        ids = [(await service.remember(f"before the compaction {i}")).memory_id for i in range(2)]
        with anyio.fail_after(60):
            await asyncio.to_thread(entered.wait)  # the second commit asked for a compaction: it is held
        assert kinds == ["compact"]
        with anyio.fail_after(60):  # acknowledged while the compaction has not finished
            ids += [(await service.remember(f"while compacting {i}")).memory_id for i in range(5)]
        assert service.writer.compactions == 0 and service.writer.commits == 7
    finally:
        release.set()
    assert await service.writer.housekeeping_idle()
    assert service.writer.compactions >= 1
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


async def test_a_write_queued_past_its_deadline_answers_503_store_busy_and_is_never_written(
        make_settings: SettingsFactory, tmp_path: Path) -> None:
    settings = make_settings(commit_deadline_s=0.5, lock_timeout_s=60)
    db = tmp_path / "lancedb"
    with run_server(settings) as server:
        async with httpx.AsyncClient(base_url=server.url + "/api/lancedb", timeout=60) as http:
            os.mkdir(db / LOCK_DIR_NAME)  # memory-lancedb-pro holds the write lock
            try:
                first = asyncio.create_task(http.post("/memories", json={"text": "the first is committing"}))
                await _until(lambda: _flock_held(db))  # the writer took it and waits for the plugin's lock
                started = time.monotonic()
                second = await http.post("/memories", json={"text": "the second waits in the queue"})
                waited = time.monotonic() - started
            finally:
                os.rmdir(db / LOCK_DIR_NAME)
            assert second.status_code == 503 and second.json()["code"] == "store_busy"
            assert int(second.headers["Retry-After"]) >= 1
            assert waited < 10  # the deadline, not the lock's 60 s timeout
            answer = await first  # already committing at its deadline: it lands and is acknowledged
            assert answer.status_code == 200, answer.text
            listed = (await http.get("/memories", params={"limit": 10})).json()
    texts = [m["text"] for m in (listed["items"] if isinstance(listed, dict) else listed)]
    assert texts == ["the first is committing"]


@pytest.mark.parametrize("kind", ["update", "delete"])
async def test_a_forget_or_update_queued_past_its_deadline_is_dropped(make_settings: SettingsFactory,
                                                                       tmp_path: Path, kind: str) -> None:
    db = tmp_path / "lancedb"
    async with MemoryService.open(make_settings(commit_deadline_s=0.3, lock_timeout_s=60)) as service:
        kept = (await service.remember("a memory that stays as it is")).memory_id
        os.mkdir(db / LOCK_DIR_NAME)
        try:
            first = asyncio.create_task(service.remember("committing while the plugin holds the lock"))
            await _until(lambda: _flock_held(db))
            with pytest.raises(Exception) as raised:  # noqa: PT011 - the type is checked below
                if kind == "delete":
                    await service.forget(kept)
                else:
                    await service.writer.update(kept, {"importance": 0.1})
        finally:
            os.rmdir(db / LOCK_DIR_NAME)
        assert getattr(raised.value, "code", None) == "store_busy"
        await first
        rows = {row["id"]: row for row in service.store.scan(None, ["id", "importance"]).to_pylist()}
    assert kept in rows and rows[kept]["importance"] == pytest.approx(0.7)
