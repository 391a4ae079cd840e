"""Crash: kill -9 the server mid-burst, restart on the same directory, nothing acknowledged is lost: what the
kill left in the write journal is flushed into the table by the next start."""

from __future__ import annotations

import math
from datetime import timedelta
from pathlib import Path

import anyio
import httpx
import lancedb
import numpy as np
import pytest

from app.memory.service import MemoryService
from tests.conftest import SettingsFactory
from tests.harness.history import HistoryLog, check, load_events, read_final_rows, request_id_in
from tests.reliability.support import rest_remember, server_env
from tests.support.server import ServerProcess, spawn_server

CLIENTS = 6
KILL_AFTER_ACKS = 120
CYCLES = 2


class _Burst:
    def __init__(self) -> None:
        self.acks = 0
        self.enough = anyio.Event()
        self.stopped = False


async def _writer(url: str, history: HistoryLog, name: str, burst: _Burst) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        i = 0
        while not burst.stopped:
            response = await rest_remember(http, url, history, f"{name}-{i}", "crash burst write")
            i += 1
            if response is None:
                return  # the server is gone; whatever was in flight is logged as info
            if response.status_code == 200:
                burst.acks += 1
                if burst.acks >= KILL_AFTER_ACKS:
                    burst.enough.set()


async def _burst_then_kill(server: ServerProcess, histories: Path, cycle: int) -> None:
    burst = _Burst()
    logs = [HistoryLog(histories / f"cycle{cycle}-client{n}.jsonl") for n in range(CLIENTS)]
    with anyio.fail_after(120):
        async with anyio.create_task_group() as group:
            for n, log in enumerate(logs):
                group.start_soon(_writer, server.url, log, f"k{cycle}c{n}", burst)
            await burst.enough.wait()
            server.process.kill()  # SIGKILL while every client has a request in flight
            burst.stopped = True
            await anyio.to_thread.run_sync(server.process.wait, 10)
    for log in logs:
        log.close()


def _assert_rows_are_whole(db_path: Path) -> None:
    """No half-written row: every row has its text tag and a finite, unit, full-length vector."""
    table = lancedb.connect(str(db_path), read_consistency_interval=timedelta(0)).open_table("memories")
    rows = table.to_arrow().to_pylist()
    dimension = table.schema.field("vector").type.list_size
    for row in rows:
        assert request_id_in(row["text"]) is not None, row["id"]
        vector = np.asarray(row["vector"], dtype=np.float32)
        assert vector.shape == (dimension,) and np.all(np.isfinite(vector)), row["id"]
        assert math.isclose(float(np.linalg.norm(vector)), 1.0, rel_tol=1e-3), row["id"]
        assert row["scope"] == "global" and row["timestamp"] > 0, row["id"]


@pytest.mark.slow
async def test_kill_9_mid_burst_loses_no_acknowledged_write_and_the_store_reopens(
        tmp_path: Path, make_settings: SettingsFactory) -> None:
    env = server_env(tmp_path)
    histories = tmp_path / "histories"
    for cycle in range(CYCLES):
        with spawn_server(env, log_path=tmp_path / f"server-{cycle}.log") as server:
            await _burst_then_kill(server, histories, cycle)
        assert server.process.returncode == -9
    with spawn_server(env, log_path=tmp_path / "server-after.log") as server:
        async with httpx.AsyncClient(timeout=10) as http:
            assert (await http.get(f"{server.url}/readyz")).status_code == 200
            log = HistoryLog(histories / "after.jsonl")
            response = await rest_remember(http, server.url, log, "after-0", "first write after the crashes")
            log.close()
            assert response is not None and response.status_code == 200, response
            fetched = await http.get(f"{server.url}/api/lancedb/memories/{response.json()['id']}")
            assert fetched.status_code == 200
    assert server.process.returncode == -9  # killed too, its last write perhaps in the journal only
    async with MemoryService.open(make_settings()) as service:  # the next start replays it; closing flushes
        assert service.settings.db_path == tmp_path / "lancedb"
    events = load_events(sorted(histories.glob("*.jsonl")))
    verdict = check(events, read_final_rows(tmp_path / "lancedb"))
    print(f"\nCRASH x{CYCLES} {verdict.summary()}")  # noqa: T201
    assert verdict.violations == []
    assert verdict.ok >= CYCLES * KILL_AFTER_ACKS + 1
    assert all(e.detail.startswith("never sent") for e in events if e.outcome == "fail")
    _assert_rows_are_whole(tmp_path / "lancedb")
