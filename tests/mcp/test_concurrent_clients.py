"""Twenty clients at once over both transports: no crossed replies, no lost writes, unique ids."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

import anyio
import httpx
import pytest
from mcp import Client

from tests.mcp.clients import RawSseClient, sse_session, streamable_session, tool_call
from tests.support.server import LiveServer

WRITES_PER_CLIENT = 3


async def _official(url: str, connect: Callable[[str], AbstractAsyncContextManager[Client]], name: str) -> list[str]:
    ids: list[str] = []
    async with connect(url) as client:
        for n in range(WRITES_PER_CLIENT):
            content = f"fact {n} written by client {name}"
            stored = await client.call_tool("remember", {"content": content, "tags": [name]})
            assert stored.is_error is False, stored
            ids.append(stored.structured_content["memory_id"])  # type: ignore[index]
            found = await client.call_tool("recall", {"query": content, "top_k": 1})
            assert found.structured_content["memories"][0]["content"] == content  # type: ignore[index]
        mine = await client.call_tool("list_facts", {"tag": name})
        assert sorted(m["memory_id"] for m in mine.structured_content["memories"]) == sorted(ids)  # type: ignore[index]
    return ids


async def _raw(url: str, name: str) -> list[str]:
    ids: list[str] = []
    async with httpx.AsyncClient(timeout=30) as http, RawSseClient(http, url).connect() as raw:
        for n in range(WRITES_PER_CLIENT):
            content = f"fact {n} written by client {name}"
            reply = await raw.call(tool_call(f"{name}-w{n}", "remember", {"content": content, "tags": [name]}))
            ids.append(reply["result"]["structuredContent"]["memory_id"])
            found = await raw.call(tool_call(f"{name}-r{n}", "recall", {"query": content, "top_k": 1}))
            assert found["result"]["structuredContent"]["memories"][0]["content"] == content
    return ids


@pytest.mark.slow
async def test_twenty_clients_mixing_transports_write_and_read_their_own_data(live_server: LiveServer) -> None:
    results: dict[str, list[str]] = {}

    async def run(name: str) -> None:
        kind = name.split("-")[0]
        if kind == "raw":
            results[name] = await _raw(live_server.url, name)
        else:
            connect = sse_session if kind == "sse" else streamable_session
            results[name] = await _official(live_server.url, connect, name)

    names = [f"sse-{i}" for i in range(7)] + [f"http-{i}" for i in range(7)] + [f"raw-{i}" for i in range(6)]
    with anyio.fail_after(120):
        async with anyio.create_task_group() as group:
            for name in names:
                group.start_soon(run, name)

    all_ids = [memory_id for ids in results.values() for memory_id in ids]
    assert len(results) == 20
    assert len(all_ids) == 20 * WRITES_PER_CLIENT
    assert len(set(all_ids)) == len(all_ids), "a memory id was handed out twice"
    async with streamable_session(live_server.url) as client:
        listed = await client.call_tool("list_facts", {"limit": 200})
    stored = {m["memory_id"] for m in listed.structured_content["memories"]}  # type: ignore[index]
    assert set(all_ids) <= stored, "an acknowledged write is missing"
