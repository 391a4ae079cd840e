import time
from pathlib import Path

import httpx

from tests.support.server import LiveServer, spawn_server


def test_healthz_answers_on_a_real_server(live_server: LiveServer) -> None:
    response = httpx.get(f"{live_server.url}/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_reports_both_services(live_server: LiveServer) -> None:
    body = httpx.get(f"{live_server.url}/readyz").json()
    assert body["status"] == "ok"
    assert body["memory"]["ready"] is True
    assert body["kanban"]["ready"] is True


def test_after_readyz_says_200_every_front_end_serves_the_next_request_over_fresh_starts(tmp_path: Path) -> None:
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}}}
    mcp_headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    answers = []
    for start in range(5):  # fresh processes: imports and opening take as long as for a real start
        env = {"MEMORY_MCP_DB_PATH": str(tmp_path / f"db-{start}"), "MEMORY_MCP_EMBEDDING_PROVIDER": "hash",
               "MEMORY_MCP_KANBAN_DB": str(tmp_path / f"board-{start}.sqlite3"), "MEMORY_MCP_OPENCLAW_CONFIG": ""}
        with spawn_server(env, log_path=tmp_path / f"serve-{start}.log", loaded=False) as server, \
                httpx.Client(base_url=server.url, timeout=30) as http:
            deadline = time.monotonic() + 60
            # Polled as a load balancer would, as fast as it can: a 200 too early is what this looks for.
            while (ready := http.get("/readyz")).status_code != 200:
                assert ready.status_code == 503 and time.monotonic() < deadline, ready.text
            answers.append((http.get("/api/lancedb/stats").status_code, http.get("/api/kanban/board").status_code,
                            http.post("/mcp", json=initialize, headers=mcp_headers).status_code))
    assert answers == [(200, 200, 200)] * 5
