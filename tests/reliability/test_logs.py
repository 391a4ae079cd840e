"""Logs are structured JSON lines with request ids, and memory contents never reach them at info level."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import httpx
import pytest

from tests.mcp.clients import streamable_session
from tests.reliability.support import server_env
from tests.support.server import spawn_server

SENTINEL = "SENTINEL-7f3a9c-private-memory-text"


@pytest.mark.slow
async def test_memory_text_never_appears_in_the_default_log_and_lines_are_json_with_request_ids(
        tmp_path: Path) -> None:
    log_path = tmp_path / "server.log"
    job = tmp_path / "job.sh"
    job.write_text("#!/bin/sh\necho done\n", encoding="utf-8")
    job.chmod(0o700)
    env = server_env(tmp_path, MEMORY_MCP_JOB_COMMAND=str(job), MEMORY_MCP_JOBS_ALLOW_ROOT="true")
    with spawn_server(env, log_path=log_path) as server:
        url = server.url
        async with httpx.AsyncClient(timeout=30) as http:
            stored = await http.post(f"{url}/api/lancedb/memories", json={"text": f"REST {SENTINEL}"})
            assert stored.status_code == 200
            refused = await http.post(f"{url}/api/lancedb/memories", json={"text": f"{SENTINEL}\x00"})
            assert refused.status_code == 422
            patched = await http.patch(f"{url}/api/lancedb/memories/{stored.json()['id']}",
                                       json={"text": f"patched {SENTINEL}"})
            assert patched.status_code == 200
            too_long = await http.post(f"{url}/api/lancedb/memories", json={"text": "x" * 8001 + SENTINEL})
            assert too_long.status_code == 422
            searched = await http.get(f"{url}/api/lancedb/vector-search", params={"q": SENTINEL})
            assert searched.status_code == 200
            task = await http.post(f"{url}/api/kanban/tasks", json={"title": "run the job", "assignee": "ci"})
            ran = await http.post(f"{url}/api/kanban/jobs", json={"task_id": task.json()["id"], "wait_s": 10})
            assert ran.json()["status"] == "succeeded"
        async with streamable_session(url) as mcp:
            assert (await mcp.call_tool("remember", {"content": f"MCP {SENTINEL}"})).is_error is False
            assert (await mcp.call_tool("remember", {"content": f"{SENTINEL}\x07"})).is_error is True
            assert (await mcp.call_tool("recall", {"query": SENTINEL})).is_error is False
            assert (await mcp.call_tool("check_duplicate", {"content": SENTINEL})).is_error is False
        server.process.send_signal(signal.SIGTERM)
        server.process.wait(30)
    lines = log_path.read_text(encoding="utf-8").splitlines()
    assert not [line for line in lines if SENTINEL in line]
    # Every line is the server's own: no library warning (LanceDB's at a job's fork, say) in between.
    assert [line for line in lines if not line.startswith("{")] == []
    records = [json.loads(line) for line in lines]
    assert records, lines
    for record in records:
        assert {"ts", "level", "logger", "msg"} <= set(record), record
    refusals = [r for r in records if r["msg"].startswith("tool remember refused")]
    assert refusals and all(r.get("request_id") for r in refusals)
