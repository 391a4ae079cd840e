"""Token permissions: reads need any valid token; memory writes, board writes and jobs need their permission.

Over both front ends on a live server: REST answers 403 ``{detail, code: "forbidden"}``, the official MCP
clients get a ``forbidden: ...`` tool error, and in either case nothing changes and no job starts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from app.settings import Settings
from tests.conftest import SettingsFactory
from tests.kanban.support import write_job_script
from tests.mcp.clients import sse_session, streamable_session
from tests.support.server import LiveServer, run_server

MAIN = "main-token-0123456789"
TOKENS: dict[str, Any] = {
    "tok-bob-all-0123456789": {"agent": "bob", "allow": ["memory:write", "board:write", "jobs:trigger"]},
    "tok-carol-plain-0123456789": "carol",
    "tok-dave-read-0123456789": {"agent": "dave", "allow": []},
    "tok-erin-board-0123456789": {"agent": "erin", "allow": ["board:write"]},
}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def script(tmp_path: Path) -> Path:
    return write_job_script(tmp_path / "jobs")


@pytest.fixture
def server(make_settings: SettingsFactory, script: Path) -> Iterator[LiveServer]:
    settings = make_settings(token=MAIN, agent_tokens=TOKENS, jobs_allow_root=True, job_command=[str(script)])
    with run_server(settings) as live:
        yield live


@pytest.fixture
def main(server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, headers=bearer(MAIN), timeout=30) as http:
        yield http


def jobs_started(script: Path) -> list[Path]:
    """Every job run leaves a probe file next to the script."""
    return sorted(script.parent.glob("probe-*.json"))


def assert_forbidden(response: httpx.Response) -> None:
    assert response.status_code == 403, response.text
    assert response.json()["code"] == "forbidden" and set(response.json()) == {"detail", "code"}


def test_a_plain_agent_token_writes_memory_and_the_board_but_starts_no_job(
        server: LiveServer, main: httpx.Client, script: Path) -> None:
    with httpx.Client(base_url=server.url, headers=bearer("tok-carol-plain-0123456789"), timeout=30) as carol:
        assert carol.post("/api/lancedb/memories", json={"text": "carol was here"}).status_code == 200
        task_id = carol.post("/api/kanban/tasks", json={"title": "Carol's", "assignee": "carol"}).json()["id"]
        refused = carol.post("/api/kanban/jobs", json={"task_id": task_id, "wait_s": 5})
        assert_forbidden(refused)
        assert "jobs:trigger" in refused.json()["detail"]
        assert_forbidden(carol.post("/api/kanban/jobs", json={"wait_s": "not a number"}))  # refused before parsing
    assert main.get("/api/kanban/jobs").json() == [] and jobs_started(script) == []
    assert main.get(f"/api/kanban/tasks/{task_id}").json()["jobs"] == []


def test_a_token_allowed_jobs_and_the_main_token_start_them(
        server: LiveServer, main: httpx.Client, script: Path) -> None:
    with httpx.Client(base_url=server.url, headers=bearer("tok-bob-all-0123456789"), timeout=30) as bob:
        job = bob.post("/api/kanban/jobs", json={"wait_s": 20})
    assert job.status_code == 200 and job.json()["status"] == "succeeded" and job.json()["actor"] == "bob"
    assert main.post("/api/kanban/jobs", json={"wait_s": 20}).json()["status"] == "succeeded"
    assert len(jobs_started(script)) == 2


def test_a_read_only_token_reads_everything_and_changes_nothing(
        server: LiveServer, main: httpx.Client, script: Path) -> None:
    memory_id = main.post("/api/lancedb/memories", json={"text": "a fact to keep"}).json()["id"]
    task_id = main.post("/api/kanban/tasks", json={"title": "Keep", "assignee": "a"}).json()["id"]
    with httpx.Client(base_url=server.url, headers=bearer("tok-dave-read-0123456789"), timeout=30) as dave:
        for path in ("/api/lancedb/memories", f"/api/lancedb/memories/{memory_id}", "/api/lancedb/stats",
                     "/api/kanban/board", f"/api/kanban/tasks/{task_id}", "/api/kanban/jobs"):
            assert dave.get(path).status_code == 200, path
        assert dave.get("/api/lancedb/search", params={"q": "fact"}).json()[0]["id"] == memory_id
        for method, path, body in [
            ("POST", "/api/lancedb/memories", {"text": "no"}),
            ("PATCH", f"/api/lancedb/memories/{memory_id}", {"text": "changed"}),
            ("DELETE", f"/api/lancedb/memories/{memory_id}", None),
            ("POST", "/api/kanban/tasks", {"title": "No", "assignee": "a"}),
            ("PATCH", f"/api/kanban/tasks/{task_id}", {"title": "Changed"}),
            ("POST", f"/api/kanban/tasks/{task_id}/move", {"to_status": "done"}),
            ("POST", f"/api/kanban/tasks/{task_id}/notes", {"text": "no"}),
            ("DELETE", f"/api/kanban/tasks/{task_id}", None),
            ("POST", "/api/kanban/jobs", {}),
        ]:
            assert_forbidden(dave.request(method, path, json=body))
    assert main.get(f"/api/lancedb/memories/{memory_id}").json()["text"] == "a fact to keep"
    task = main.get(f"/api/kanban/tasks/{task_id}").json()
    assert (task["title"], task["status"], task["notes"]) == ("Keep", "todo", [])
    assert main.get("/api/lancedb/stats").json()["total"] == 1 and len(main.get("/api/kanban/board").json()) == 1
    assert jobs_started(script) == []


def test_a_board_only_token_may_not_write_memory(server: LiveServer) -> None:
    with httpx.Client(base_url=server.url, headers=bearer("tok-erin-board-0123456789"), timeout=30) as erin:
        assert erin.post("/api/kanban/tasks", json={"title": "Erin's", "assignee": "erin"}).status_code == 201
        assert_forbidden(erin.post("/api/lancedb/memories", json={"text": "not allowed"}))


@pytest.mark.parametrize("transport", [streamable_session, sse_session], ids=["streamable", "sse"])
async def test_mcp_tools_refuse_what_the_token_may_not_do_and_start_nothing(
        server: LiveServer, script: Path, transport: Any) -> None:
    async with transport(server.url, bearer("tok-carol-plain-0123456789")) as carol:
        created = await carol.call_tool("create_task", {"title": "Via MCP", "assignee": "carol"})
        assert created.is_error is False, created
        refused = await carol.call_tool("trigger_job", {"task_id": created.structured_content["id"], "wait": 5})
        assert refused.is_error is True and refused.content[0].text.startswith("forbidden: ")
        assert "jobs:trigger" in refused.content[0].text
        assert (await carol.call_tool("remember", {"content": "carol may write memory"})).is_error is False
    async with transport(server.url, bearer("tok-dave-read-0123456789")) as dave:
        for tool, arguments in [
            ("remember", {"content": "no"}),
            ("forget", {"memory_id": "abc"}),
            ("create_task", {"title": "No", "assignee": "a"}),
            ("move_card", {"task_id": created.structured_content["id"], "to_status": "done"}),
            ("trigger_job", {}),
        ]:
            result = await dave.call_tool(tool, arguments)
            assert result.is_error is True and result.content[0].text.startswith("forbidden: "), (tool, result)
        assert (await dave.call_tool("list_facts", {})).is_error is False
        board = await dave.call_tool("get_board", {})
        columns = {column["status"]: column["cards"] for column in board.structured_content["columns"]}
        assert [card["title"] for card in columns["todo"]] == ["Via MCP"] and columns["done"] == []
    async with httpx.AsyncClient(base_url=server.url, headers=bearer(MAIN), timeout=30) as main:
        assert (await main.get("/api/kanban/jobs")).json() == []
        assert (await main.get("/api/lancedb/stats")).json()["total"] == 1
    assert jobs_started(script) == []


async def test_an_mcp_token_allowed_jobs_triggers_one(server: LiveServer, script: Path) -> None:
    async with streamable_session(server.url, bearer("tok-bob-all-0123456789")) as bob:
        job = await bob.call_tool("trigger_job", {"wait": 20})
    assert job.is_error is False and job.structured_content["status"] == "succeeded"
    assert len(jobs_started(script)) == 1


async def test_with_no_tokens_configured_everything_is_allowed(make_settings: SettingsFactory, script: Path) -> None:
    settings = make_settings(jobs_allow_root=True, job_command=[str(script)])
    with run_server(settings) as server:
        async with streamable_session(server.url) as client:
            assert (await client.call_tool("trigger_job", {"wait": 20})).is_error is False
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
            assert (await http.post("/api/kanban/jobs", json={"wait_s": 20})).status_code == 200
    assert len(jobs_started(script)) == 2


def test_agent_tokens_take_a_name_or_an_entry_with_permissions(monkeypatch: pytest.MonkeyPatch,
                                                               make_settings: SettingsFactory) -> None:
    monkeypatch.setenv("MEMORY_MCP_AGENT_TOKENS", json.dumps(TOKENS))
    tokens = Settings(embedding_provider="hash").agent_tokens
    assert tokens["tok-carol-plain-0123456789"].agent == "carol"
    assert tokens["tok-carol-plain-0123456789"].allow == {"memory:write", "board:write"}
    assert tokens["tok-bob-all-0123456789"].allow == {"memory:write", "board:write", "jobs:trigger"}
    assert tokens["tok-dave-read-0123456789"].allow == frozenset()
    assert "tok-bob-all-0123456789" not in repr(make_settings(agent_tokens=TOKENS))


@pytest.mark.parametrize("entry", [
    {"agent": "bob", "allow": ["jobs:run"]}, {"agent": "bob", "allow": "jobs:trigger"}, {"allow": []},
    {"agent": "bob", "scopes": ["memory:write"]}, 7,
])
def test_a_bad_entry_stops_start_up_naming_the_permissions_never_the_token(make_settings: SettingsFactory,
                                                                            entry: object) -> None:
    with pytest.raises(ValidationError) as raised:
        make_settings(agent_tokens={"tok-SECRET-0123456789": entry})
    [message] = [error["msg"] for error in raised.value.errors()]  # what memory-mcp serve prints
    assert "MEMORY_MCP_AGENT_TOKENS" in message and "board:write, jobs:trigger, memory:write" in message
    assert "SECRET" not in message


def test_a_refusal_is_logged_with_the_agent_and_the_permission_never_the_token(
        server: LiveServer, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("INFO", logger="app.edge.auth"), httpx.Client(base_url=server.url, timeout=30) as http:
        assert_forbidden(http.post("/api/kanban/jobs", json={}, headers=bearer("tok-carol-plain-0123456789")))
    [line] = [record.getMessage() for record in caplog.records if record.name == "app.edge.auth"]
    assert "jobs:trigger" in line and "'carol'" in line and "tok-carol" not in line
