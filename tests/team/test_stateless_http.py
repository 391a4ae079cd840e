"""MEMORY_MCP_STATELESS_HTTP: replicas behind a load balancer with no sticky routing serve one MCP client.

The official Python client talks through a round-robin "balancer" (an httpx transport sending each request
to the next replica), so consecutive requests of one client land on different servers sharing an s3://
table. Stateful servers would answer the second request 404 (a session the other replica never saw).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.mcp.clients import EXPECTED_TOOLS
from tests.support.s3 import Bucket
from tests.team.servers import team

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
STATELESS = {"MEMORY_MCP_STATELESS_HTTP": "true"}


class RoundRobin(httpx2.AsyncBaseTransport):
    """A load balancer without sticky sessions: request n goes to port ``ports[n % len(ports)]``."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = ports
        self.sent: Counter[int] = Counter()
        self._next = 0
        self._inner = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        port = self.ports[self._next % len(self.ports)]
        self._next += 1
        self.sent[port] += 1
        request.url = request.url.copy_with(port=port)
        request.headers["host"] = f"127.0.0.1:{port}"
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


async def test_one_client_is_served_by_two_stateless_replicas_in_turn(s3_bucket: Bucket, tmp_path: Path,
                                                                     postgres_url: str) -> None:
    with team(s3_bucket, tmp_path, STATELESS, STATELESS, team_db=postgres_url) as (first, second):
        balancer = RoundRobin([first.port, second.port])
        http = httpx2.AsyncClient(transport=balancer, timeout=httpx2.Timeout(30.0, read=60.0))
        with anyio.fail_after(120):
            async with http, Client(streamable_http_client(f"{first.url}/mcp", http_client=http)) as client:  # type: ignore[arg-type]
                listed = await client.list_tools()
                stored = await client.call_tool("remember", {"content": "replicas share the bucket team-notes"})
                found = await client.call_tool("recall", {"query": "replicas share the bucket team-notes"})
                gone = await client.call_tool("forget", {"memory_id": stored.structured_content["memory_id"]})  # type: ignore[index]
    assert {tool.name for tool in listed.tools} == EXPECTED_TOOLS
    assert stored.is_error is False and found.is_error is False and gone.is_error is False
    hits = found.structured_content["memories"]  # type: ignore[index]
    assert hits[0]["memory_id"] == stored.structured_content["memory_id"]  # type: ignore[index]
    assert balancer.sent[first.port] >= 2 and balancer.sent[second.port] >= 2  # both replicas served the client


async def test_a_stateless_server_opens_no_session(s3_bucket: Bucket, tmp_path: Path) -> None:
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                  "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                             "clientInfo": {"name": "team-test", "version": "1"}}}
    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}
    with team(s3_bucket, tmp_path, STATELESS) as (server,):
        async with httpx.AsyncClient(timeout=30) as http:
            response = await http.post(f"{server.url}/mcp", json=initialize, headers=headers)
            call = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
            listed = await http.post(f"{server.url}/mcp", json=call, headers=headers)  # no session id sent
    assert response.status_code == 200, response.text
    assert "mcp-session-id" not in response.headers
    assert listed.status_code == 200 and "remember" in listed.text
