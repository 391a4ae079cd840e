"""Streamable HTTP protocol details clients rely on (SEC-13): 202 for notifications, -32601, bad versions."""

from __future__ import annotations

from collections.abc import AsyncIterator
from uuid import UUID

import httpx
import pytest

from tests.support.server import LiveServer

ACCEPT_BOTH = {"accept": "application/json, text/event-stream"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


@pytest.fixture
async def session(live_server: LiveServer) -> AsyncIterator[tuple[httpx.AsyncClient, dict[str, str]]]:
    async with httpx.AsyncClient(base_url=live_server.url, timeout=10) as http:
        opened = await http.post("/mcp", json=INITIALIZE, headers=ACCEPT_BOTH)
        assert opened.status_code == 200
        headers = {
            **ACCEPT_BOTH,
            "mcp-session-id": opened.headers["mcp-session-id"],
            "mcp-protocol-version": "2025-06-18",
        }
        yield http, headers


async def test_a_notification_is_accepted_with_an_empty_body(session: tuple[httpx.AsyncClient, dict[str, str]]) -> None:
    http, headers = session
    response = await http.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
    assert response.status_code == 202
    assert response.content == b""


async def test_an_unknown_method_is_method_not_found(session: tuple[httpx.AsyncClient, dict[str, str]]) -> None:
    http, headers = session
    response = await http.post("/mcp", json={"jsonrpc": "2.0", "id": 6, "method": "no/such_method"}, headers=headers)
    assert '"code":-32601' in response.text


async def test_an_unsupported_protocol_version_is_400(session: tuple[httpx.AsyncClient, dict[str, str]]) -> None:
    http, headers = session
    bad = {**headers, "mcp-protocol-version": "1999-01-01"}
    response = await http.post("/mcp", json={"jsonrpc": "2.0", "id": 5, "method": "ping"}, headers=bad)
    assert response.status_code == 400


async def test_the_session_id_is_a_uuid4_with_122_random_bits(
    session: tuple[httpx.AsyncClient, dict[str, str]],
) -> None:
    _, headers = session
    session_id = UUID(headers["mcp-session-id"])
    assert session_id.version == 4
