"""The six kanban tools through the official clients: same board on both transports, errors a model can read."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from app.settings import Settings
from tests.mcp.clients import payload, sse_session, streamable_session
from tests.support.server import LiveServer


@pytest.fixture
def settings(make_settings: Callable[..., Settings], kanban_db: Path | str) -> Settings:
    """The tools on a SQLite board and on a PostgreSQL board."""
    return make_settings(kanban_db=kanban_db)


async def test_a_task_created_over_sse_is_moved_over_streamable_http(live_server: LiveServer) -> None:
    async with sse_session(live_server.url) as sse:
        created = await sse.call_tool(
            "create_task",
            {"title": "Fix the flaky test", "assignee": "claude-code", "description": "It fails on CI", "step1": "a"},
        )
        assert created.is_error is False, created
        task = created.structured_content
        assert task is not None and task["status"] == "todo"
        assert payload(created) == task
    async with streamable_session(live_server.url) as http:
        moved = await http.call_tool("move_card", {"task_id": task["id"], "to_status": "running"})
        assert moved.is_error is False, moved
        board = await http.call_tool("get_board", {})
        columns = {c["status"]: [card["id"] for card in c["cards"]] for c in board.structured_content["columns"]}  # type: ignore[index]
        assert task["id"] in columns["running"]
        running = await http.call_tool("list_tasks_by_status", {"status": "running"})
        assert [t["id"] for t in running.structured_content["tasks"]] == [task["id"]]  # type: ignore[index]
        detail = await http.call_tool("get_task", {"task_id": task["id"]})
        assert [h["to_status"] for h in detail.structured_content["history"]][-1] == "running"  # type: ignore[index]


async def test_a_lost_claim_is_a_status_conflict(live_server: LiveServer) -> None:
    async with streamable_session(live_server.url) as client:
        created = await client.call_tool("create_task", {"title": "Claim me", "assignee": "antigravity"})
        task_id = created.structured_content["id"]  # type: ignore[index]
        first = await client.call_tool(
            "move_card", {"task_id": task_id, "to_status": "running", "expected_status": "todo"}
        )
        assert first.is_error is False
        second = await client.call_tool(
            "move_card", {"task_id": task_id, "to_status": "running", "expected_status": "todo"}
        )
        assert second.is_error is True
        assert second.content[0].text.startswith("status_conflict: ")  # type: ignore[union-attr]


async def test_kanban_domain_errors_name_their_code(live_server: LiveServer) -> None:
    async with sse_session(live_server.url) as client:
        missing = await client.call_tool("get_task", {"task_id": "TASK-99999"})
        assert missing.content[0].text.startswith("task_not_found: ")  # type: ignore[union-attr]
        bad_status = await client.call_tool("list_tasks_by_status", {"status": "someday"})
        assert bad_status.content[0].text.startswith("invalid_input: status: must be 'backlog', ")  # type: ignore[union-attr]
        no_job = await client.call_tool("trigger_job", {})
        assert no_job.is_error is True
        assert no_job.content[0].text.startswith("job_not_configured: ")  # type: ignore[union-attr]
