"""The official SDK clients over both transports see the same 11 tools and the same data."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import httpx
import pytest
from mcp import Client

from tests.mcp.clients import EXPECTED_TOOLS, payload, sse_session, streamable_session
from tests.support.server import LiveServer

Connect = Callable[..., AbstractAsyncContextManager[Client]]
TRANSPORTS = pytest.mark.parametrize("connect", [streamable_session, sse_session], ids=["streamable", "sse"])


@TRANSPORTS
async def test_initialize_list_remember_recall_forget(live_server: LiveServer, connect: Connect) -> None:
    async with connect(live_server.url) as client:
        assert client.server_info is not None and client.server_info.name == "memory-mcp"
        listed = await client.list_tools()
        assert {tool.name for tool in listed.tools} == EXPECTED_TOOLS
        assert len(listed.tools) == 11

        stored = await client.call_tool(
            "remember", {"content": "The build cache lives in /var/cache/ci", "tags": ["ci"]}
        )
        assert stored.is_error is False
        memory_id = stored.structured_content["memory_id"]  # type: ignore[index]
        assert payload(stored)["memory_id"] == memory_id

        found = await client.call_tool("recall", {"query": "The build cache lives in /var/cache/ci", "top_k": 3})
        assert found.is_error is False
        hits = found.structured_content["memories"]  # type: ignore[index]
        assert hits[0]["memory_id"] == memory_id
        assert hits[0]["content"] == "The build cache lives in /var/cache/ci"
        assert set(hits[0]) >= {"memory_id", "content", "score", "tags", "agent", "importance", "timestamp"}
        assert payload(found) == found.structured_content

        gone = await client.call_tool("forget", {"memory_id": memory_id})
        assert gone.is_error is False
        again = await client.call_tool("forget", {"memory_id": memory_id})
        assert again.is_error is True


@TRANSPORTS
async def test_domain_errors_are_tool_errors_with_a_readable_code(live_server: LiveServer, connect: Connect) -> None:
    async with connect(live_server.url) as client:
        missing = await client.call_tool("forget", {"memory_id": "0f0e4f49-5a2f-4d0c-9b36-1f6c1d7cb3a1"})
        assert missing.is_error is True
        assert missing.content[0].text.startswith("memory_not_found: ")  # type: ignore[union-attr]
        bad_scope = await client.call_tool("remember", {"content": "x", "agent": "no such scope!"})
        assert bad_scope.is_error is True
        code = bad_scope.content[0].text.split(":", 1)[0]  # type: ignore[union-attr]
        assert code.isidentifier() and code != "internal_error"
        assert "Traceback" not in bad_scope.content[0].text  # type: ignore[union-attr]


@TRANSPORTS
async def test_arguments_outside_the_schema_are_one_line_invalid_input_errors(
        live_server: LiveServer, connect: Connect) -> None:
    cases = [
        ({"query": "x", "top_k": 0}, "invalid_input: top_k: must be greater than or equal to 1"),
        ({"query": "x", "top_k": 51}, "invalid_input: top_k: must be less than or equal to 50"),
        ({"top_k": 5}, "invalid_input: query: required"),
        ({"query": "x", "agent": "claude-code"}, "invalid_input: agent: unknown argument"),
    ]
    async with connect(live_server.url) as client:
        for arguments, expected in cases:
            result = await client.call_tool("recall", arguments)
            assert result.is_error is True, arguments
            assert result.content[0].text == expected  # type: ignore[union-attr]


@TRANSPORTS
async def test_an_unknown_argument_is_refused_and_nothing_is_stored(live_server: LiveServer, connect: Connect) -> None:
    async with connect(live_server.url) as client:
        refused = await client.call_tool("remember", {"content": "a note for one agent", "scope": "agent:x"})
        assert refused.is_error is True
        assert refused.content[0].text == "invalid_input: scope: unknown argument"  # type: ignore[union-attr]
        listed = await client.call_tool("list_facts", {})
        assert listed.structured_content["memories"] == []  # type: ignore[index]


@TRANSPORTS
@pytest.mark.filterwarnings("ignore:ping is removed:mcp.shared.exceptions.MCPDeprecationWarning")
async def test_ping_is_answered(live_server: LiveServer, connect: Connect) -> None:
    async with connect(live_server.url) as client:
        await client.send_ping()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
async def test_a_client_in_auto_mode_connects_over_streamable_http(live_server: LiveServer) -> None:
    async with streamable_session(live_server.url, mode="auto") as client:
        listed = await client.list_tools()
        assert {tool.name for tool in listed.tools} == EXPECTED_TOOLS
        result = await client.call_tool("list_facts", {"limit": 1})
        assert result.is_error is False


async def test_a_memory_from_one_agent_over_sse_is_seen_over_streamable_http(live_server: LiveServer) -> None:
    async with sse_session(live_server.url) as sse:
        stored = await sse.call_tool(
            "remember", {"content": "Deploys are frozen on Fridays", "agent": "antigravity", "tags": ["process"]}
        )
        assert stored.is_error is False, stored
        memory_id = stored.structured_content["memory_id"]  # type: ignore[index]
    async with streamable_session(live_server.url) as http:
        found = await http.call_tool("recall", {"query": "Deploys are frozen on Fridays"})
        assert found.structured_content["memories"][0]["memory_id"] == memory_id  # type: ignore[index]
        assert found.structured_content["memories"][0]["agent"] == "antigravity"  # type: ignore[index]
        theirs = await http.call_tool("list_facts", {"agent": "antigravity"})
        assert [m["memory_id"] for m in theirs.structured_content["memories"]] == [memory_id]  # type: ignore[index]
        others = await http.call_tool("list_facts", {"agent": "claude-code"})
        assert others.structured_content["memories"] == []  # type: ignore[index]


async def test_a_memory_written_over_mcp_is_visible_over_rest(live_server: LiveServer) -> None:
    async with streamable_session(live_server.url) as client:
        stored = await client.call_tool("remember", {"content": "REST and MCP share one table"})
        memory_id = stored.structured_content["memory_id"]  # type: ignore[index]
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.get(f"{live_server.url}/api/lancedb/memories/{memory_id}")
    if response.status_code == 404 and response.json().get("detail") == "Not Found":
        pytest.fail("the REST memory routes are not installed yet")
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    assert memory_id in str(body)
