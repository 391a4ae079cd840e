"""The store on object storage (team mode), in one process: no local files, recovery skipped, retention
timed by LanceDB's version list, rewrites only under the compaction lease."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pyarrow as pa
import pytest

from app.memory.service import MemoryService
from app.memory.store import connection, retention
from app.memory.store.lease import CompactionLease
from app.memory.store.locks import ProcessLock
from app.memory.store.writes import OLD_VERSIONS_KEPT
from app.settings import Settings
from tests.conftest import SettingsFactory
from tests.support.s3 import Bucket


def _s3_settings(make_settings: SettingsFactory, bucket: Bucket, **overrides: Any) -> Settings:
    return make_settings(db_path=bucket.uri(), storage_options=bucket.s3.storage_options(), **overrides)


def _files(root: Path) -> set[Path]:
    return set(root.rglob("*"))


async def _until(condition: Callable[[], bool], within_s: float = 60.0) -> None:
    """Poll ``condition`` (the flusher's and the housekeeping thread's counters) until it holds, or fail."""
    deadline = time.monotonic() + within_s
    while not await asyncio.to_thread(condition):
        assert time.monotonic() < deadline, "the condition never held"
        await asyncio.sleep(0.01)


async def test_a_store_on_s3_writes_no_local_files_skips_recovery_and_stays_ready(
        make_settings: SettingsFactory, s3_bucket: Bucket, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    settings = _s3_settings(make_settings, s3_bucket)
    before = _files(tmp_path)
    with caplog.at_level(logging.INFO, logger="app.memory.store.recovery"):
        async with MemoryService.open(settings) as service:
            with anyio.fail_after(60):
                stored = await service.remember("team mode keeps the table in a bucket")
                hits = (await service.recall("team mode keeps the table in a bucket")).hits
            health = service.health()
            assert isinstance(service.store.lock, ProcessLock)
            journal = Path(service.writer.journal.where)
    assert hits[0].id == stored.memory_id
    assert health["ready"] is True and health["degraded"] is False
    assert any("local-only" in r.getMessage() and settings.db_uri in r.getMessage() for r in caplog.records)
    created = _files(tmp_path) - before
    # Without a team database the write journal is a file beside the board (with its WAL and flush lease).
    assert journal.parent == tmp_path and journal in created
    ours = [p for p in created if p.name != "kanban.sqlite3" and not p.name.startswith(journal.name)]
    assert not ours, created  # no lock, table or quarantine files


async def test_concurrent_remembers_of_two_services_on_one_s3_table_are_all_stored_once(
        make_settings: SettingsFactory, s3_bucket: Bucket) -> None:
    settings = _s3_settings(make_settings, s3_bucket)
    async with MemoryService.open(settings) as first, MemoryService.open(settings) as second:
        with anyio.fail_after(120):
            results = []

            async def write(service: MemoryService, name: str) -> None:
                for i in range(20):
                    results.append((await service.remember(f"{name} wrote note {i}")).memory_id)

            async with anyio.create_task_group() as group:
                for _ in range(3):
                    group.start_soon(write, first, "first")
                    group.start_soon(write, second, "second")
        table = connection.connect(settings).open_table(settings.table)
        await _until(lambda: table.count_rows() >= 120)  # the flusher folds both services' writes in
        assert sorted(table.to_arrow().column("id").to_pylist()) == sorted(results)
    stored = table.to_arrow().column("id").to_pylist()  # and closing flushed none of them again
    assert len(results) == 120 and len(set(results)) == 120
    assert sorted(stored) == sorted(results)


def test_retention_on_s3_reads_commit_times_from_the_version_list(make_settings: SettingsFactory,
                                                                 s3_bucket: Bucket) -> None:
    settings = _s3_settings(make_settings, s3_bucket)
    table = connection.connect(settings).create_table("t", pa.table({"x": [0]}))
    for i in range(1, 3):
        table.add(pa.table({"x": [i]}))
    stamps = retention.commit_times(table)
    assert sorted(stamps) == [1, 2, 3]
    assert all(abs(stamp - time.time()) < 120 for stamp in stamps.values())
    # When the window began just after version 2's commit, version 2 was the newest then: it stays,
    # so the age reaches back to its commit; version 1, superseded before the window, may go.
    now = stamps[2] + OLD_VERSIONS_KEPT.total_seconds() + 0.001
    age = retention.prune_age(None, OLD_VERSIONS_KEPT, table=table, now=now, margin=timedelta(0))
    assert age.total_seconds() == pytest.approx(now - stamps[2], abs=1e-3)
    assert age.total_seconds() < now - stamps[1] or stamps[1] == stamps[2]
    # With no version list (none readable) only the keep window and the margin are applied.
    assert retention.prune_age(None, OLD_VERSIONS_KEPT) == OLD_VERSIONS_KEPT + retention.MARGIN


async def test_the_writer_leaves_compaction_to_the_instance_holding_the_lease(
        make_settings: SettingsFactory, s3_bucket: Bucket) -> None:
    settings = _s3_settings(make_settings, s3_bucket, compact_every_commits=1)
    other = CompactionLease(connection.connect(settings), settings.table, holder="another instance")
    async with MemoryService.open(settings) as service:
        expires = other.try_acquire()
        assert expires is not None
        with anyio.fail_after(60):
            for i in range(3):
                await service.remember(f"written while another instance compacts {i}")
        await _until(lambda: service.writer.skipped_for_lease >= 1)  # flushed, and the compaction it asked for
        assert await service.writer.housekeeping_idle()  # rewrites run in their own thread
        assert service.writer.compactions == 0
        other.release(expires)
        with anyio.fail_after(60):
            for i in range(3):
                await service.remember(f"written after the lease came back {i}")
        await _until(lambda: service.writer.compactions >= 1)
        assert len(await service.list_memories(limit=100)) == 6


async def test_the_standard_aws_variables_reach_lancedb_without_storage_options(
        make_settings: SettingsFactory, s3_bucket: Bucket, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"AWS_ENDPOINT": s3_bucket.s3.endpoint, "AWS_ALLOW_HTTP": "true", "AWS_ACCESS_KEY_ID": "test",
                        "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    settings = make_settings(db_path=s3_bucket.uri())
    assert settings.storage_options == {}
    async with MemoryService.open(settings) as service:
        with anyio.fail_after(60):
            stored = await service.remember("credentials came from the environment")
    explicit = _s3_settings(make_settings, s3_bucket)
    ids = connection.connect(explicit).open_table(settings.table).to_arrow().column("id").to_pylist()
    assert ids == [stored.memory_id]
