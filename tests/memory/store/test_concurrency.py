"""Many writers: one process with hundreds of tasks, a second OS process, the cross-process lock."""

from __future__ import annotations

import asyncio
import os
import sys
import textwrap
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import lancedb
import pytest

from app.errors import Unavailable
from app.memory.errors import StoreBusy
from app.memory.rows import new_row
from app.memory.service import MemoryService
from app.memory.store import locks, retention
from app.memory.store import writes as writes_module
from app.memory.store.locks import WriteLock
from tests.conftest import SettingsFactory


def _all_ids(db_path: Path) -> list[str]:
    table = lancedb.connect(str(db_path), read_consistency_interval=timedelta(0)).open_table("memories")
    return [str(i) for i in table.to_arrow().column("id").to_pylist()]


async def test_300_concurrent_remembers_are_all_stored_with_unique_ids(make_settings: SettingsFactory,
                                                                       tmp_path: Path) -> None:
    async with MemoryService.open(make_settings()) as service:
        with anyio.fail_after(60):
            results = await asyncio.gather(*(service.remember(f"concurrent memory {i}") for i in range(300)))
        commits = service.writer.commits
    ids = [r.memory_id for r in results]
    assert len(set(ids)) == 300
    assert sorted(_all_ids(tmp_path / "lancedb")) == sorted(ids)
    assert commits < 300  # adds were coalesced into batches


async def test_a_full_write_queue_answers_busy_at_once_and_accepted_writes_land_after_the_lock_is_free(
        make_settings: SettingsFactory, tmp_path: Path) -> None:
    async with MemoryService.open(make_settings(write_queue_max=2)) as service:
        held = tmp_path / "lancedb" / locks.LOCK_DIR_NAME
        os.mkdir(held)  # another writer (as memory-lancedb-pro would) holds the lock: the flusher waits
        try:
            tasks = [asyncio.create_task(service.remember(f"queued {i}")) for i in range(10)]
            with anyio.fail_after(10):  # every one answered while the lock is held
                outcomes = await asyncio.gather(*tasks, return_exceptions=True)
            assert _all_ids(tmp_path / "lancedb") == []  # acknowledged, not in the table yet
        finally:
            os.rmdir(held)
    busy = [o for o in outcomes if isinstance(o, BaseException)]
    assert busy and all(isinstance(o, StoreBusy) and o.code == "store_busy" for o in busy)
    accepted = [o.memory_id for o in outcomes if not isinstance(o, BaseException)]
    assert 1 <= len(accepted) <= 3
    assert sorted(_all_ids(tmp_path / "lancedb")) == sorted(accepted)  # flushed once the lock was free


_EXTERNAL_WRITER = textwrap.dedent("""
    import os, sys, time, uuid, json
    from datetime import timedelta
    import lancedb, numpy as np
    db_path, count = sys.argv[1], int(sys.argv[2])
    lock = os.path.join(db_path, ".memory-write.lock.lock")
    table = lancedb.connect(db_path, read_consistency_interval=timedelta(0)).open_table("memories")
    dim = table.schema.field("vector").type.list_size
    print("ready", flush=True)
    for i in range(count):
        while True:  # proper-lockfile's mkdir protocol, as memory-lancedb-pro takes it
            try:
                os.mkdir(lock)
                break
            except FileExistsError:
                time.sleep(0.002)
        try:
            vector = np.random.default_rng(i).standard_normal(dim).astype("float32")
            table.add([{"id": str(uuid.uuid4()), "text": f"external {i}", "vector": vector / np.linalg.norm(vector),
                        "scope": "global", "category": "", "importance": 0.5, "timestamp": int(time.time() * 1000),
                        "metadata": json.dumps({"agent": "openclaw"})}])
        finally:
            os.rmdir(lock)
    print("done", flush=True)
""")


@pytest.mark.slow
async def test_a_second_process_writing_the_same_table_loses_nothing(make_settings: SettingsFactory,
                                                                     tmp_path: Path) -> None:
    db_path = tmp_path / "lancedb"
    async with MemoryService.open(make_settings()) as service:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _EXTERNAL_WRITER, str(db_path), "60", stdout=asyncio.subprocess.PIPE)
        assert process.stdout is not None
        assert (await process.stdout.readline()).strip() == b"ready"
        ours: list[str] = []
        with anyio.fail_after(120):
            for round_ in range(6):
                results = await asyncio.gather(*(service.remember(f"ours {round_}-{i}") for i in range(10)))
                ours += [r.memory_id for r in results]
            assert (await process.communicate())[0].strip() == b"done"
        assert process.returncode == 0
        await service.writer.flush()
        seen_by_service = service.store.count()
    ids = _all_ids(db_path)
    assert len(ids) == len(set(ids)) == 120 and seen_by_service == 120
    assert set(ours) <= set(ids)


async def test_closing_flushes_every_acknowledged_write_once_the_lock_is_free(make_settings: SettingsFactory,
                                                                             tmp_path: Path) -> None:
    held = tmp_path / "lancedb" / locks.LOCK_DIR_NAME
    async with MemoryService.open(make_settings()) as service:
        os.mkdir(held)  # another writer holds the lock: the flusher cannot fold the writes below in
        vectors = await service.embedder.embed_documents([f"late {i}" for i in range(20)])
        rows = [new_row(f"late {i}", vectors[i], "global", [], 0.5, None, "hash-bow-v1") for i in range(20)]
        with anyio.fail_after(30):
            outcomes = await asyncio.gather(*(service.writer.add([row]) for row in rows))  # acknowledged
        assert _all_ids(tmp_path / "lancedb") == []
        closing = asyncio.create_task(service.writer.close())
        await anyio.lowlevel.checkpoint()
        with pytest.raises(Unavailable):  # refused from the moment closing began
            await service.writer.add([new_row("after close", vectors[0], "global", [], 0.5, None, "hash-bow-v1")])
        assert not closing.done()  # it waits for the lock to flush them
        os.rmdir(held)
        with anyio.fail_after(30):
            await closing
        with pytest.raises(Unavailable):
            await service.remember("after close")
    assert {memory_id for ids in outcomes for memory_id in ids} == set(_all_ids(tmp_path / "lancedb"))
    assert len(outcomes) == 20


async def _committed_by_the_flusher(service: MemoryService, commits: int) -> None:
    """Until the flusher's own rounds (each followed by its housekeeping decision) made ``commits`` commits."""
    deadline = time.monotonic() + 30
    while service.writer.commits < commits:
        assert time.monotonic() < deadline, f"{service.writer.commits} commits, expected {commits}"
        await asyncio.sleep(0.01)  # polling the flusher's counter with a deadline


async def test_the_flusher_compacts_every_n_commits(make_settings: SettingsFactory) -> None:
    async with MemoryService.open(make_settings(compact_every_commits=4, flush_interval_s=0.01)) as service:
        for i in range(9):
            await service.remember(f"sequential {i}")
            await _committed_by_the_flusher(service, i + 1)  # one commit per write
        assert service.writer.commits == 9
        assert await service.writer.housekeeping_idle()  # compactions run in their own thread
        assert service.writer.compactions >= 2
        fragments = service.store.table.stats()["fragment_stats"]["num_fragments"]
    assert fragments <= 2


def test_write_locks_exclude_each_other_across_handles(tmp_path: Path) -> None:
    inside = 0
    overlaps = 0
    guard = threading.Lock()

    def worker() -> None:
        nonlocal inside, overlaps
        lock = WriteLock(tmp_path, timeout_s=30)  # a separate handle, like another process
        for _ in range(100):
            with lock.hold():
                with guard:
                    inside += 1
                    overlaps += inside > 1
                with guard:
                    inside -= 1

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert overlaps == 0 and not (tmp_path / locks.LOCK_DIR_NAME).exists()


def test_a_stale_mkdir_lock_is_taken_over(tmp_path: Path) -> None:
    stale = tmp_path / locks.LOCK_DIR_NAME
    os.mkdir(stale)
    old = time.time() - locks.STALE_S - 5
    os.utime(stale, (old, old))
    with WriteLock(tmp_path, timeout_s=5).hold():
        assert stale.is_dir() and time.time() - stale.stat().st_mtime < locks.STALE_S
    assert not stale.exists()


def test_a_live_mkdir_lock_makes_the_writer_wait_then_report_busy(tmp_path: Path) -> None:
    os.mkdir(tmp_path / locks.LOCK_DIR_NAME)
    started = time.monotonic()
    with pytest.raises(StoreBusy), WriteLock(tmp_path, timeout_s=0.3).hold():
        pass
    assert time.monotonic() - started >= 0.3


def test_the_holder_refreshes_the_lock_mtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(locks, "REFRESH_S", 0.01)
    path = tmp_path / locks.LOCK_DIR_NAME
    with WriteLock(tmp_path).hold():
        first = path.stat().st_mtime_ns
        deadline = time.monotonic() + 5
        while path.stat().st_mtime_ns == first and time.monotonic() < deadline:
            time.sleep(0.01)  # polling an external condition (the refresher thread) with a deadline
        assert path.stat().st_mtime_ns > first


def test_one_refresher_serves_every_hold_and_never_touches_a_lock_it_released(tmp_path: Path) -> None:
    lock = WriteLock(tmp_path)
    with lock.hold():
        first = lock._refresher
    for _ in range(4):
        with lock.hold():
            assert lock._refresher is first
    assert first is not None and first.is_alive()
    path = tmp_path / locks.LOCK_DIR_NAME
    os.mkdir(path)  # now another process's lock
    old = time.time() - 60
    os.utime(path, (old, old))
    lock.touch_if_held()
    assert path.stat().st_mtime == pytest.approx(old)


async def _reader_on_three_memories(service: MemoryService, tmp_path: Path) -> tuple[int, Any]:
    """Three memories, then another process's handle checked out on that version (still reading it)."""
    for i in range(3):
        await service.remember(f"before the reader {i}")
    await service.writer.flush()
    seen = service.store.version()
    reader = lancedb.connect(str(tmp_path / "lancedb")).open_table("memories")
    reader.checkout(seen)
    return seen, reader


async def test_a_compaction_keeps_recent_versions_for_their_readers_and_prunes_older_ones(
        make_settings: SettingsFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with MemoryService.open(make_settings(compact_every_commits=1000)) as service:
        store = service.store
        seen, reader = await _reader_on_three_memories(service, tmp_path)
        await service.remember("after the reader")
        await service.writer.flush()
        await asyncio.to_thread(store.optimize)
        assert reader.count_rows() == 3 and len(reader.to_arrow()) == 3  # its files are still there
        monkeypatch.setattr(writes_module, "OLD_VERSIONS_KEPT", timedelta(milliseconds=1))
        monkeypatch.setattr(retention, "MARGIN", timedelta(0))
        await service.remember("after the window")
        await service.writer.flush()
        await asyncio.to_thread(store.optimize)
        kept = [v["version"] for v in store.table.list_versions()]
    assert seen not in kept and max(kept) == store.version()


async def test_a_compaction_keeps_the_version_that_was_the_newest_a_moment_ago_however_old(
        make_settings: SettingsFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A quiet spell, then one write and a compaction: the version before the write is old by its
    creation, but a reader may still be on it; its files must outlive the compaction."""
    monkeypatch.setattr(writes_module, "OLD_VERSIONS_KEPT", timedelta(milliseconds=1))  # "long ago"
    async with MemoryService.open(make_settings(compact_every_commits=1000)) as service:
        store = service.store
        seen, reader = await _reader_on_three_memories(service, tmp_path)
        await service.remember("the first write after it")
        await service.writer.flush()
        await asyncio.to_thread(store.optimize)  # rewrites every row: the old files are now unused
        assert reader.count_rows() == 3 and len(reader.to_arrow()) == 3
        assert seen in [v["version"] for v in store.table.list_versions()]
