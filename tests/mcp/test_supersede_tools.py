"""Superseding through the official MCP clients over both transports against a live server."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest
from mcp import Client

from tests.mcp.clients import payload, sse_session, streamable_session
from tests.support.server import LiveServer

Connect = Callable[..., AbstractAsyncContextManager[Client]]
TRANSPORTS = pytest.mark.parametrize("connect", [streamable_session, sse_session], ids=["streamable", "sse"])
OLD = "timestamps must be milliseconds in every API payload"
NEW = "timestamps are now seconds in every API payload"
CHECKLIST = ("deploy checklist: run the migrations, tag the release, announce it in the team channel, "
             "then watch the error dashboard for an hour")


async def _call(client: Client, tool: str, arguments: dict[str, Any]) -> Any:
    result = await client.call_tool(tool, arguments)
    assert result.is_error is False, result
    return payload(result)


def _links(memories: list[dict[str, Any]]) -> dict[str, tuple[str | None, str | None]]:
    return {m["memory_id"]: (m["supersedes"], m["superseded_by"]) for m in memories}


@TRANSPORTS
async def test_recall_shows_the_newer_memory_and_the_older_one_only_when_asked(
        live_server: LiveServer, connect: Connect) -> None:
    async with connect(live_server.url) as client:
        old = (await _call(client, "remember", {"content": OLD}))["memory_id"]
        new = (await _call(client, "remember", {"content": NEW, "supersedes": old}))["memory_id"]
        query = {"query": "timestamps API payload", "top_k": 10}
        assert _links((await _call(client, "recall", query))["memories"]) == {new: (old, None)}
        shown = await _call(client, "recall", {**query, "include_superseded": True})
        assert _links(shown["memories"]) == {new: (old, None), old: (None, new)}
        listed = await _call(client, "list_facts", {})
        assert _links(listed["memories"]) == {new: (old, None), old: (None, new)}


@TRANSPORTS
async def test_superseding_an_unknown_memory_is_memory_not_found_and_stores_nothing(
        live_server: LiveServer, connect: Connect) -> None:
    async with connect(live_server.url) as client:
        refused = await client.call_tool("remember", {"content": NEW, "supersedes": "nosuchid"})
        assert refused.is_error is True
        assert refused.content[0].text.startswith("memory_not_found: ")  # type: ignore[union-attr]
        assert (await _call(client, "list_facts", {}))["memories"] == []


@TRANSPORTS
async def test_check_duplicate_and_remember_suggest_superseding_a_changed_fact(
        live_server: LiveServer, connect: Connect) -> None:
    async with connect(live_server.url) as client:
        first = (await _call(client, "remember", {"content": CHECKLIST}))["memory_id"]
        hint = f"if this replaces {first}, remember with supersedes={first}"
        changed = CHECKLIST.replace("an hour", "two hours")
        assert (await _call(client, "check_duplicate", {"content": changed}))["hint"] == hint
        assert (await _call(client, "check_duplicate", {"content": CHECKLIST}))["hint"] is None
        stored = await _call(client, "remember", {"content": changed})
        assert stored["duplicate"] == {"memory_id": first, "score": stored["duplicate"]["score"], "hint": hint}
