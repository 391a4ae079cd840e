"""The public tool contract: names, input schemas and annotations, snapshotted so changes show in review.

Regenerate deliberately with ``MEMORY_MCP_UPDATE_TOOL_SNAPSHOT=1 .venv/bin/pytest tests/mcp/test_tool_contract.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from mcp import Client

from app.container import Services
from app.mcp.front_end import build_server
from tests.mcp.clients import EXPECTED_TOOLS

SNAPSHOT = Path(__file__).with_name("tool_list.snapshot.json")
READ_ONLY = {"recall", "list_facts", "check_duplicate", "get_board", "get_task", "list_tasks_by_status"}


async def _listed_tools() -> list[dict[str, Any]]:
    async with Client(build_server(Services()), mode="legacy") as client:
        listed = await client.list_tools()
    return [tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in listed.tools]


def _contract(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"name": tool["name"], "inputSchema": tool["inputSchema"], "annotations": tool.get("annotations")}
        for tool in sorted(tools, key=lambda tool: tool["name"])
    ]


async def test_the_tool_list_matches_the_committed_snapshot() -> None:
    contract = _contract(await _listed_tools())
    if os.environ.get("MEMORY_MCP_UPDATE_TOOL_SNAPSHOT") == "1":
        SNAPSHOT.write_text(json.dumps(contract, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    assert contract == json.loads(SNAPSHOT.read_text(encoding="utf-8"))


async def test_every_tool_documents_itself_and_its_arguments_for_a_model() -> None:
    tools = await _listed_tools()
    assert {tool["name"] for tool in tools} == EXPECTED_TOOLS
    for tool in tools:
        assert len(tool["description"]) >= 40, tool["name"]
        for name, schema in tool["inputSchema"].get("properties", {}).items():
            assert schema.get("description"), f"{tool['name']}.{name} has no description"
        assert tool["outputSchema"]["type"] == "object", tool["name"]


async def test_annotations_mark_reads_and_the_destructive_forget() -> None:
    annotations = {tool["name"]: tool["annotations"] for tool in await _listed_tools()}
    for name, hints in annotations.items():
        assert hints.get("readOnlyHint") is (name in READ_ONLY), name
    assert annotations["forget"]["destructiveHint"] is True
    assert annotations["forget"]["idempotentHint"] is True
    assert annotations["remember"]["destructiveHint"] is False


async def test_argument_names_are_exactly_the_public_ones() -> None:
    arguments = {tool["name"]: set(tool["inputSchema"].get("properties", {})) for tool in await _listed_tools()}
    assert arguments["remember"] == {"content", "tags", "agent", "importance"}
    assert arguments["recall"] == {"query", "top_k", "agent_filter"}
    assert arguments["list_facts"] == {"agent", "tag", "limit", "offset"}
    assert arguments["check_duplicate"] == {"content", "threshold"}
    assert arguments["forget"] == {"memory_id"}
    assert arguments["get_board"] == set()
    assert arguments["get_task"] == {"task_id"}
    assert arguments["create_task"] == {
        "title",
        "assignee",
        "description",
        "task_id",
        "step1",
        "step2",
        "step3",
        "step4",
        "status",
        "priority",
        "tags",
    }
    assert arguments["move_card"] == {"task_id", "to_status", "expected_status"}
    assert arguments["trigger_job"] == {"task_id", "args", "wait"}
    assert arguments["list_tasks_by_status"] == {"status"}
