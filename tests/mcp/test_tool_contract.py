"""The public tool contract: names, input schemas and annotations, snapshotted so changes show in review
(and so are the capabilities, prompts and resource templates); the size of what a model reads; and how
arguments that do not fit are refused.

Regenerate deliberately with ``MEMORY_MCP_UPDATE_TOOL_SNAPSHOT=1 .venv/bin/pytest tests/mcp/test_tool_contract.py``.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from app.container import Services
from app.kanban.models import STATUSES
from app.mcp.front_end import build_server
from app.memory.service import MemoryService
from tests.conftest import SettingsFactory
from tests.mcp.clients import EXPECTED_TOOLS

SNAPSHOT = Path(__file__).with_name("tool_list.snapshot.json")
SERVER_SNAPSHOT = Path(__file__).with_name("server_contract.snapshot.json")
READ_ONLY = {"recall", "list_facts", "check_duplicate", "get_board", "get_task", "list_tasks_by_status"}
STATUS_CHOICES = ", ".join(f"'{status}'" for status in STATUSES[:-1]) + f" or '{STATUSES[-1]}'"


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


async def test_the_capabilities_prompts_and_resource_templates_match_the_committed_snapshot() -> None:
    async with Client(build_server(Services()), mode="legacy", cache=None) as client:
        contract = {
            "capabilities": client.server_capabilities.model_dump(mode="json", by_alias=True, exclude_none=True),
            "prompts": [p.model_dump(mode="json", by_alias=True, exclude_none=True)
                        for p in (await client.list_prompts()).prompts],
            "resourceTemplates": [t.model_dump(mode="json", by_alias=True, exclude_none=True)
                                  for t in (await client.list_resource_templates()).resource_templates],
        }
    if os.environ.get("MEMORY_MCP_UPDATE_TOOL_SNAPSHOT") == "1":
        SERVER_SNAPSHOT.write_text(json.dumps(contract, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    assert contract == json.loads(SERVER_SNAPSHOT.read_text(encoding="utf-8"))


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
    assert arguments["remember"] == {"content", "tags", "agent", "importance", "supersedes"}
    assert arguments["recall"] == {"query", "top_k", "agent_filter", "include_superseded"}
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


MAX_DEFINITION_CHARS = 9_000


async def test_the_tool_definitions_a_model_reads_stay_under_9000_characters() -> None:
    # What a client puts in the model's context for every turn: name, description and input schema.
    definitions = [
        {"name": tool["name"], "description": tool["description"], "inputSchema": tool["inputSchema"]}
        for tool in await _listed_tools()
    ]
    assert len(json.dumps(definitions)) < MAX_DEFINITION_CHARS


async def test_task_statuses_are_an_enum_in_every_kanban_schema() -> None:
    schemas = {tool["name"]: tool["inputSchema"]["properties"] for tool in await _listed_tools()}
    fields = [("move_card", "to_status"), ("move_card", "expected_status"), ("create_task", "status"),
              ("list_tasks_by_status", "status")]
    for tool, field in fields:
        schema = schemas[tool][field]
        enums = [schema.get("enum")] + [option.get("enum") for option in schema.get("anyOf", [])]
        assert list(STATUSES) in enums, (tool, field)


@pytest.fixture
async def memory_server(make_settings: SettingsFactory) -> AsyncIterator[Client]:
    """The MCP server over a real memory service (hash embedder, LanceDB in tmp_path), in memory."""
    async with MemoryService.open(make_settings()) as memory, \
            Client(build_server(Services(_memory=memory)), mode="legacy") as client:
        yield client


@pytest.mark.parametrize(("tool", "arguments", "expected"), [
    ("recall", {"query": "x", "top_k": 51}, "invalid_input: top_k: must be less than or equal to 50"),
    ("recall", {"top_k": 5}, "invalid_input: query: required"),
    ("recall", {"query": "x", "top_k": "many"},
     "invalid_input: top_k: must be a valid integer, unable to parse string as an integer"),
    ("remember", {"content": "x", "importance": 2}, "invalid_input: importance: must be less than or equal to 1"),
    ("remember", {"content": "x", "tags": ["ok", 7]}, "invalid_input: tags.1: must be a valid string"),
    ("list_facts", {"limit": 0, "offset": -1},
     "invalid_input: limit: must be greater than or equal to 1; offset: must be greater than or equal to 0"),
    ("list_tasks_by_status", {"status": "someday"}, "invalid_input: status: must be " + STATUS_CHOICES),
    ("recall", {"query": "x", "top_n": 3}, "invalid_input: top_n: unknown argument"),
    ("get_board", {"foo": 1}, "invalid_input: foo: unknown argument"),
])
async def test_an_invalid_argument_is_one_line_of_invalid_input_naming_the_field(
        memory_server: Client, tool: str, arguments: dict[str, Any], expected: str) -> None:
    result = await memory_server.call_tool(tool, arguments)
    assert result.is_error is True
    assert result.content[0].text == expected  # type: ignore[union-attr]


async def test_a_call_with_an_unknown_argument_is_refused_before_anything_is_stored(memory_server: Client) -> None:
    refused = await memory_server.call_tool("remember", {"content": "scoped note", "scope": "agent:x"})
    assert refused.content[0].text == "invalid_input: scope: unknown argument"  # type: ignore[union-attr]
    listed = await memory_server.call_tool("list_facts", {})
    assert listed.structured_content == {"memories": [], "offset": 0, "next_offset": None}


async def test_a_tool_that_does_not_exist_is_named_in_the_same_error_shape(memory_server: Client) -> None:
    result = await memory_server.call_tool("remember_everything", {})
    assert result.is_error is True
    assert result.content[0].text.startswith("unknown_tool: ")  # type: ignore[union-attr]
