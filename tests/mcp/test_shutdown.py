"""SIGTERM/SIGINT with open SSE streams on both transports: a quick, clean exit and properly ended streams."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import anyio
import httpx
import pytest

from tests.support.server import ServerProcess, spawn_server

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
ACCEPT_BOTH = {"accept": "application/json, text/event-stream"}


async def _hold_legacy_stream(http: httpx.AsyncClient, url: str, opened: anyio.Event, ended: list[str]) -> None:
    async with http.stream("GET", f"{url}/mcp/sse") as response:
        lines = response.aiter_lines()
        assert await anext(lines) == "event: endpoint"
        opened.set()
        async for _ in lines:
            pass
    ended.append("legacy")


async def _hold_streamable_stream(http: httpx.AsyncClient, url: str, opened: anyio.Event, ended: list[str]) -> None:
    initialized = await http.post(f"{url}/mcp", json=INITIALIZE, headers=ACCEPT_BOTH)
    session = {"mcp-session-id": initialized.headers["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
    notified = await http.post(
        f"{url}/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers={**ACCEPT_BOTH, **session}
    )
    assert notified.status_code == 202
    async with http.stream("GET", f"{url}/mcp", headers={"accept": "text/event-stream", **session}) as response:
        assert response.status_code == 200
        opened.set()
        async for _ in response.aiter_bytes():
            pass
    ended.append("streamable")


async def _stop_with_open_streams(server: ServerProcess, sig: signal.Signals) -> tuple[int, float]:
    ended: list[str] = []
    async with httpx.AsyncClient(timeout=httpx.Timeout(10, read=30)) as http, anyio.create_task_group() as group:
        opened = [anyio.Event() for _ in range(4)]
        for n, event in enumerate(opened):
            hold = _hold_legacy_stream if n % 2 == 0 else _hold_streamable_stream
            group.start_soon(hold, http, server.url, event, ended)
        with anyio.fail_after(20):
            for event in opened:
                await event.wait()
        started = time.monotonic()
        server.process.send_signal(sig)
        returncode = await anyio.to_thread.run_sync(server.process.wait, 15)
        elapsed = time.monotonic() - started
    # Every stream ended with a proper end of body (httpx raises on a truncated chunked response).
    assert sorted(ended) == ["legacy", "legacy", "streamable", "streamable"]
    return returncode, elapsed


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_a_signal_with_open_streams_exits_cleanly_within_seconds(tmp_path: Path, sig: signal.Signals) -> None:
    env = {
        "MEMORY_MCP_DB_PATH": str(tmp_path / "lancedb"),
        "MEMORY_MCP_KANBAN_DB": str(tmp_path / "kanban.sqlite3"),
        "MEMORY_MCP_EMBEDDING_PROVIDER": "hash",
        "MEMORY_MCP_LOG_FORMAT": "text",
    }
    log_path = tmp_path / "server.log"
    with spawn_server(env, log_path=log_path) as server:
        returncode, elapsed = await _stop_with_open_streams(server, sig)
    log = log_path.read_text(encoding="utf-8", errors="replace")
    assert elapsed <= 5.0, f"took {elapsed:.1f} s\n{log}"
    for marker in ("ASGI", "Traceback", "Exception"):
        assert marker not in log, log
    assert "Application shutdown complete" in log, log
    # uvicorn re-raises the signal after its graceful shutdown; app/cli/__init__.py turns that into exit 0.
    assert returncode == 0, log
