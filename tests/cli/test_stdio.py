"""``memory-mcp stdio`` spawned by the official SDK's ``stdio_client``, forwarding to a real server."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import ExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError
from pydantic import SecretStr

from app.cli import main, stdio_proxy
from app.cli.stdio_proxy import shipped_tools
from app.container import Services
from app.mcp.front_end import build_server
from tests.conftest import SettingsFactory
from tests.mcp.clients import EXPECTED_TOOLS, payload, streamable_session
from tests.support.server import LiveServer, ServerProcess, free_port, run_server, spawn_server

REPO = Path(__file__).resolve().parents[2]
TOKEN = "stdio-test-token"


@asynccontextmanager
async def stdio_session(url: str, log: Path, **env: str) -> AsyncIterator[Client]:
    """``memory-mcp stdio`` as a child process, pointed at ``url``; its stderr goes to ``log``."""
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "app.cli", "stdio"], env={"MEMORY_MCP_URL": url, **env}, cwd=REPO
    )
    with log.open("w", encoding="utf-8") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:  # type: ignore[arg-type]
            yield client


def server_env(tmp_path: Path) -> dict[str, str]:
    """A ``memory-mcp serve`` process on temp files with the fast hash embedder."""
    return {
        "MEMORY_MCP_DB_PATH": str(tmp_path / "lancedb"),
        "MEMORY_MCP_KANBAN_DB": str(tmp_path / "kanban.sqlite3"),
        "MEMORY_MCP_MODEL_CACHE_DIR": str(tmp_path / "model-cache"),
        "MEMORY_MCP_EMBEDDING_PROVIDER": "hash",
    }


async def start_server(servers: ExitStack, tmp_path: Path, port: int, name: str) -> ServerProcess:
    """``memory-mcp serve`` on ``port``; spawn_server blocks until /healthz answers, so it runs off the event loop."""
    server = spawn_server(server_env(tmp_path), log_path=tmp_path / f"{name}.log", port=port)
    started: ServerProcess = await anyio.to_thread.run_sync(servers.enter_context, server)
    return started


def text_of(result: Any) -> str:
    text: str = result.content[0].text
    return text


async def test_tools_are_the_servers_own_and_calls_reach_its_store(live_server: LiveServer, tmp_path: Path) -> None:
    async with streamable_session(live_server.url) as direct:
        own_tools = (await direct.list_tools()).tools

    async with stdio_session(live_server.url, tmp_path / "stdio.log") as client:
        assert client.server_info is not None and client.server_info.name == "memory-mcp"
        assert client.instructions is not None and "recall" in client.instructions
        listed = (await client.list_tools()).tools
        stored = await client.call_tool("remember", {"content": "Stdio clients share the server's memory"})
        found = await client.call_tool("recall", {"query": "Stdio clients share the server's memory", "top_k": 3})
        board = await client.call_tool("get_board", {})

    assert {tool.name for tool in listed} == EXPECTED_TOOLS
    assert [tool.model_dump() for tool in listed] == [tool.model_dump() for tool in own_tools]
    assert stored.is_error is False, stored
    memory_id = payload(stored)["memory_id"]
    assert payload(found)["memories"][0]["memory_id"] == memory_id
    assert payload(found)["memories"][0]["content"] == "Stdio clients share the server's memory"
    assert board.is_error is False, board
    assert board.structured_content == payload(board)
    async with streamable_session(live_server.url) as direct:
        seen = await direct.call_tool("recall", {"query": "Stdio clients share the server's memory"})
    assert payload(seen)["memories"][0]["memory_id"] == memory_id


async def test_an_unreachable_server_is_a_tool_error_naming_the_url_and_a_later_call_reconnects(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    make_settings()  # clears MEMORY_MCP_* from this process, so the spawned server sees only server_env
    port = free_port()  # nothing listens here until the server below starts
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "stdio.log"
    async with stdio_session(url, log) as client:
        down = await client.call_tool("remember", {"content": "Written once the server is up"})
        listed_down = await client.list_tools()  # what a desktop client starting before the server sees
        with ExitStack() as servers:
            await start_server(servers, tmp_path, port, "server")
            up = await client.call_tool("remember", {"content": "Written once the server is up"})
            listed = await client.list_tools()

    assert down.is_error is True
    assert f"{url}/mcp" in text_of(down) and "memory-mcp serve" in text_of(down)
    assert [tool.model_dump() for tool in listed_down.tools] == [tool.model_dump() for tool in listed.tools]
    assert {tool.name for tool in listed_down.tools} == EXPECTED_TOOLS
    assert f"not reachable at {url}/mcp" in log.read_text(encoding="utf-8")
    assert "listing the tools this package ships" in log.read_text(encoding="utf-8")
    assert up.is_error is False, up
    assert len(payload(up)["memory_id"]) > 0
    assert {tool.name for tool in listed.tools} == EXPECTED_TOOLS


async def test_a_bridge_started_without_its_server_says_so_on_stderr_and_in_its_instructions(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    make_settings()
    url = f"http://127.0.0.1:{free_port()}"
    log = tmp_path / "stdio.log"
    async with stdio_session(url, log) as client:
        instructions = client.instructions
        said_at_start = log.read_text(encoding="utf-8")  # before any call: what `claude --debug` shows
    assert f"not reachable at {url}/mcp" in said_at_start and "memory-mcp serve" in said_at_start
    assert instructions is not None and f"not reachable at {url}/mcp" in instructions


async def test_the_shipped_tool_list_is_the_servers_own() -> None:
    """Regenerate with ``MEMORY_MCP_UPDATE_TOOL_SNAPSHOT=1`` (as the contract snapshot of tests/mcp)."""
    async with Client(build_server(Services()), mode="legacy") as client:
        served = [tool.model_dump(mode="json", by_alias=True, exclude_none=True)
                  for tool in (await client.list_tools()).tools]
    if os.environ.get("MEMORY_MCP_UPDATE_TOOL_SNAPSHOT") == "1":
        text = json.dumps(served, indent=1, ensure_ascii=False) + "\n"
        stdio_proxy.SHIPPED_TOOLS.write_text(text, encoding="utf-8")
    shipped = [tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in shipped_tools().tools]
    assert shipped == served


async def test_a_restarted_server_is_reached_again_without_a_failed_call(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    make_settings()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    async with stdio_session(url, tmp_path / "stdio.log") as client:
        with ExitStack() as first:
            await start_server(first, tmp_path, port, "first")
            before = await client.call_tool("remember", {"content": "Written before the restart"})
        with ExitStack() as second:
            await start_server(second, tmp_path, port, "second")
            # The old session id is unknown to the new process (404 before anything runs): sent again.
            after = await client.call_tool("recall", {"query": "Written before the restart"})

    assert before.is_error is False, before
    assert after.is_error is False, after
    assert payload(after)["memories"][0]["memory_id"] == payload(before)["memory_id"]


async def test_the_token_comes_from_the_environment(make_settings: SettingsFactory, tmp_path: Path) -> None:
    with run_server(make_settings(token=SecretStr(TOKEN))) as live:
        async with stdio_session(live.url, tmp_path / "without.log") as client:
            refused = await client.call_tool("list_facts", {})
        async with stdio_session(live.url, tmp_path / "with.log", MEMORY_MCP_TOKEN=TOKEN) as client:
            allowed = await client.call_tool("list_facts", {})

    assert refused.is_error is True
    assert "refused the token (HTTP 401)" in text_of(refused) and "MEMORY_MCP_TOKEN" in text_of(refused)
    assert TOKEN not in (tmp_path / "with.log").read_text(encoding="utf-8")
    assert allowed.is_error is False, allowed


def test_a_malformed_url_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MEMORY_MCP_URL", "localhost:3002")
    assert main(["stdio"]) == 2
    assert "MEMORY_MCP_URL must look like http://127.0.0.1:3002" in capsys.readouterr().err


async def test_prompts_resources_and_completion_are_the_servers_own(live_server: LiveServer, tmp_path: Path) -> None:
    async with streamable_session(live_server.url) as direct:
        created = await direct.call_tool("create_task", {"title": "Seen through stdio", "assignee": "claude-code"})
        task_id = payload(created)["id"]
        own_prompts = (await direct.list_prompts()).prompts
    async with stdio_session(live_server.url, tmp_path / "stdio.log") as client:
        prompts = (await client.list_prompts()).prompts
        board = await client.get_prompt("board", {})
        listed = [resource.uri for resource in (await client.list_resources()).resources]
        card = (await client.read_resource(f"task://{task_id}")).contents[0]
        completed = await client.complete(types.PromptReference(name="handoff"), {"name": "task_id", "value": "1"})
        with pytest.raises(MCPError) as missing:
            await client.read_resource("task://TASK-99999")
    assert [prompt.model_dump() for prompt in prompts] == [prompt.model_dump() for prompt in own_prompts]
    assert f"{task_id} Seen through stdio" in board.messages[0].content.text  # type: ignore[union-attr]
    assert listed[:2] == ["board://current", f"task://{task_id}"]
    assert "Seen through stdio" in card.text  # type: ignore[union-attr]
    assert completed.completion.values == [task_id]
    assert missing.value.code == -32002 and missing.value.message.startswith("task_not_found: ")
