"""Load: 8 clients over SSE, Streamable HTTP and REST plus 2 OpenClaw-style processes, one LanceDB dir."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import anyio
import httpx
import pytest

from tests.harness.history import HistoryLog, check, load_events, percentiles, read_final_rows
from tests.mcp.clients import poll_until, sse_session, streamable_session
from tests.reliability.support import mcp_remember, rest_remember, scaled, server_env
from tests.support.server import spawn_server

REPO_ROOT = Path(__file__).resolve().parents[2]
CLIENTS = 8
WRITES_PER_CLIENT = scaled(250)
EXTERNAL_PROCESSES = 2
WRITES_PER_PROCESS = scaled(125)  # each add is its own commit and fragment, as OpenClaw writes
TRANSPORTS = ("rest", "streamable", "sse")


async def _client(url: str, transport: str, history: HistoryLog, name: str) -> None:
    if transport == "rest":
        async with httpx.AsyncClient(timeout=30) as http:
            for i in range(WRITES_PER_CLIENT):
                await rest_remember(http, url, history, f"{name}-{i}", f"load write over {transport}")
        return
    connect = streamable_session if transport == "streamable" else sse_session
    async with connect(url) as client:
        for i in range(WRITES_PER_CLIENT):
            await mcp_remember(client, history, f"{name}-{i}", f"load write over {transport}")


async def _external(db_path: Path, history_path: Path, name: str) -> asyncio.subprocess.Process:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.reliability.external_writer", str(db_path), str(WRITES_PER_PROCESS),
        str(history_path), name, cwd=REPO_ROOT, stdout=asyncio.subprocess.PIPE)
    assert process.stdout is not None
    assert (await process.stdout.readline()).strip() == b"ready"
    return process


@pytest.mark.slow
@pytest.mark.long  # `make check-long`
async def test_mixed_transport_clients_and_external_processes_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    db_path = tmp_path / "lancedb"
    histories = tmp_path / "histories"
    with spawn_server(server_env(tmp_path), log_path=tmp_path / "server.log") as server:
        externals = [await _external(db_path, histories / f"external-{n}.jsonl", f"ext{n}")
                     for n in range(EXTERNAL_PROCESSES)]
        logs = [HistoryLog(histories / f"client-{n}.jsonl") for n in range(CLIENTS)]
        with anyio.fail_after(240):
            async with anyio.create_task_group() as group:
                for n, log in enumerate(logs):
                    group.start_soon(_client, server.url, TRANSPORTS[n % 3], log, f"c{n}")
            outputs = [await process.communicate() for process in externals]
        assert [process.returncode for process in externals] == [0] * EXTERNAL_PROCESSES, outputs
        # Acknowledged means journaled: the table holds them once the flusher has run (the server is killed
        # below, not stopped).
        async with httpx.AsyncClient(timeout=30) as http:
            await poll_until(lambda: http.get(f"{server.url}/readyz"),
                             lambda r: r.json()["memory"]["journal"]["depth"] == 0, within_s=60)
        for log in logs:
            log.close()
    events = load_events(sorted(histories.glob("*.jsonl")))
    verdict = check(events, read_final_rows(db_path))
    server_events = [e for e in events if not e.client_request_id.startswith("ext")]
    external_events = [e for e in events if e.client_request_id.startswith("ext")]
    p50, p99, p100 = percentiles([e.latency_s for e in server_events], 50, 99, 100)
    e50, e99 = percentiles([e.latency_s for e in external_events], 50, 99)
    print(f"\nLOAD {verdict.summary()}\n  server writes p50={p50:.1f} ms p99={p99:.1f} ms max={p100:.1f} ms;"  # noqa: T201
          f" external writes p50={e50:.1f} ms p99={e99:.1f} ms")
    for transport in TRANSPORTS:
        mine = [e.latency_s for e in server_events if TRANSPORTS[_client_number(e.client_request_id) % 3] == transport]
        t50, t99 = percentiles(mine, 50, 99)
        print(f"  {transport}: {len(mine)} writes p50={t50:.1f} ms p99={t99:.1f} ms")  # noqa: T201
    assert verdict.violations == []
    assert verdict.ok == CLIENTS * WRITES_PER_CLIENT + EXTERNAL_PROCESSES * WRITES_PER_PROCESS
    assert verdict.fail == verdict.info == 0
    assert verdict.final_rows == verdict.ok
    assert p100 < 30_000  # sanity only: no write waited anywhere near a lock timeout


def _client_number(client_request_id: str) -> int:
    return int(client_request_id.split("-", 1)[0].removeprefix("c"))
