"""MCP clients for the transport tests: the official SDK clients, and a raw client like the original agents'."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import anyio
import httpx
import httpx2
from mcp import Client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult

T = TypeVar("T")

EXPECTED_TOOLS = {
    "remember",
    "recall",
    "list_facts",
    "check_duplicate",
    "forget",
    "get_board",
    "get_task",
    "create_task",
    "move_card",
    "trigger_job",
    "list_tasks_by_status",
}


@asynccontextmanager
async def streamable_session(
    url: str, headers: dict[str, str] | None = None, *, mode: str = "legacy", **options: Any
) -> AsyncIterator[Client]:
    """The official client over Streamable HTTP at ``{url}/mcp`` (``legacy`` = the initialize handshake);
    ``options`` go to ``Client`` (``message_handler``, ``cache``, …)."""
    http = httpx2.AsyncClient(headers=headers or {}, timeout=httpx2.Timeout(30.0, read=300.0))
    transport = streamable_http_client(f"{url}/mcp", http_client=http)
    async with http, Client(transport, mode=mode, **options) as client:  # type: ignore[arg-type]
        yield client


@asynccontextmanager
async def sse_session(
    url: str, headers: dict[str, str] | None = None, *, mode: str = "legacy", **options: Any
) -> AsyncIterator[Client]:
    """The official client over legacy SSE at ``{url}/mcp/sse``; ``options`` go to ``Client``."""
    transport = sse_client(f"{url}/mcp/sse", headers=headers, timeout=30.0)
    async with Client(transport, mode=mode, **options) as client:  # type: ignore[arg-type]
        yield client


def payload(result: CallToolResult) -> Any:
    """What a client that reads only ``content[0].text`` gets: it must be JSON."""
    assert result.content, result
    return json.loads(result.content[0].text)  # type: ignore[union-attr]


class RawSseClient:
    """A raw EventSource-style client: GET the stream, split the endpoint on ``sessionId=``, POST.

    It sends ``Accept: text/event-stream`` as an EventSource does, so the server gives it the plain-path
    endpoint; the JSON form for other clients is tested in ``test_spec_sse_client.py``.
    """

    def __init__(self, http: httpx.AsyncClient, base_url: str, headers: dict[str, str] | None = None) -> None:
        self.http = http
        self.base_url = base_url
        self.headers = headers or {}
        self.endpoint = ""
        self.session_id = ""
        self.comments: list[str] = []
        self._lines: AsyncIterator[str] | None = None

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[RawSseClient]:
        headers = {"Accept": "text/event-stream", **self.headers}
        async with self.http.stream("GET", f"{self.base_url}/mcp/sse", headers=headers) as response:
            assert response.status_code == 200, response.status_code
            assert response.headers["content-type"].startswith("text/event-stream")
            self._lines = response.aiter_lines()
            event, data = await self.next_event()
            assert event == "endpoint", (event, data)
            self.endpoint = data
            self.session_id = data.split("sessionId=")[1]
            yield self

    async def next_event(self) -> tuple[str, str]:
        """The next ``(event, data)``; comment lines (keep-alives) are collected, not returned."""
        assert self._lines is not None
        event, data = "message", []
        async for line in self._lines:
            if line.startswith(":"):
                self.comments.append(line)
            elif line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip(" "))
            elif line == "" and data:
                return event, "\n".join(data)
        raise EOFError("the stream ended")

    async def post(self, message: dict[str, Any], *, query: str | None = None) -> httpx.Response:
        url = f"{self.base_url}{self.endpoint}" if query is None else f"{self.base_url}/mcp/message?{query}"
        return await self.http.post(url, json=message, headers=self.headers)

    async def reply_to(self, request_id: Any) -> dict[str, Any]:
        """Read the stream until the reply to ``request_id`` arrives (other messages are not expected)."""
        while True:
            event, data = await self.next_event()
            assert event == "message", event
            message = json.loads(data)
            if message.get("id") == request_id:
                return message
            assert "id" not in message or "method" in message, f"reply to another request: {message}"

    async def call(self, message: dict[str, Any], *, query: str | None = None) -> dict[str, Any]:
        response = await self.post(message, query=query)
        assert response.status_code == 202, (response.status_code, response.text)
        return await self.reply_to(message["id"])

    async def initialize(self) -> None:
        reply = await self.call(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2024-11-05",
                    "capabilities": {},
                    "clientInfo": {"name": "raw-test-client", "version": "1"},
                },
            }
        )
        assert "result" in reply, reply
        response = await self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert response.status_code == 202


def tool_call(request_id: int | str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }


async def poll_until(probe: Callable[[], Awaitable[T]], done: Callable[[T], bool], *, within_s: float = 10.0) -> T:
    """Probe an external condition (the server's own state) until it holds, within a deadline."""
    with anyio.fail_after(within_s):
        while True:
            value = await probe()
            if done(value):
                return value
            await anyio.sleep(0.05)  # back-off between probes of another thread's state, not synchronisation
