"""DNS-rebinding protection, session binding and session caps on both MCP transports."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import SettingsFactory
from tests.mcp.bare_server import serve_front_end_only
from tests.mcp.clients import RawSseClient, payload, sse_session, streamable_session
from tests.support.server import LiveServer, run_server

EVIL = {"Origin": "http://evil.example"}
STREAMABLE_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
PING = {"jsonrpc": "2.0", "id": 2, "method": "ping"}


async def _origin_statuses(url: str, session_id: str) -> dict[str, int]:
    async with httpx.AsyncClient(timeout=10, headers=EVIL) as http:
        sse = await http.get(f"{url}/mcp/sse")
        message = await http.post(f"{url}/mcp/message?sessionId={session_id}", json=PING)
        one_shot = await http.post(f"{url}/mcp/message", json=PING)
        streamable = await http.post(f"{url}/mcp", json=INITIALIZE, headers=STREAMABLE_HEADERS)
    return {
        "sse": sse.status_code,
        "message": message.status_code,
        "one_shot": one_shot.status_code,
        "streamable": streamable.status_code,
    }


async def test_a_foreign_origin_is_refused_on_every_mcp_route(live_server: LiveServer) -> None:
    async with httpx.AsyncClient(timeout=10) as http, RawSseClient(http, live_server.url).connect() as raw:
        statuses = await _origin_statuses(live_server.url, raw.session_id)
    assert statuses == {"sse": 403, "message": 403, "one_shot": 403, "streamable": 403}


@pytest.fixture
def bare_url(make_settings: SettingsFactory) -> Iterator[str]:
    with serve_front_end_only(make_settings()) as url:
        yield url


async def test_the_sdk_transports_refuse_a_foreign_origin_on_their_own(bare_url: str) -> None:
    async with httpx.AsyncClient(timeout=10) as http, RawSseClient(http, bare_url).connect() as raw:
        statuses = await _origin_statuses(bare_url, raw.session_id)
    assert statuses == {"sse": 403, "message": 403, "one_shot": 403, "streamable": 403}


async def test_the_sdk_transports_refuse_a_foreign_host_on_their_own(bare_url: str) -> None:
    headers = {"Host": "rebind.example:3002"}
    async with httpx.AsyncClient(timeout=10, headers=headers) as http:
        assert (await http.get(f"{bare_url}/mcp/sse")).status_code == 421
        assert (await http.post(f"{bare_url}/mcp", json=INITIALIZE, headers=STREAMABLE_HEADERS)).status_code == 421


async def test_loopback_origins_are_allowed(live_server: LiveServer) -> None:
    origin = {"Origin": f"http://localhost:{live_server.port}"}
    async with streamable_session(live_server.url, origin) as client:
        assert (await client.call_tool("list_facts", {})).is_error is False
    async with sse_session(live_server.url, origin) as client:
        assert (await client.call_tool("list_facts", {})).is_error is False


AGENT_TOKENS = {"tok-antigravity-x": "antigravity", "tok-claude-012345": "claude-code"}


@pytest.fixture
def agent_server(make_settings: SettingsFactory) -> Iterator[LiveServer]:
    settings = make_settings(agent_tokens=AGENT_TOKENS, agent_may_write_global=False)
    with run_server(settings) as server:
        yield server


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_a_legacy_session_answers_only_the_token_that_opened_it(agent_server: LiveServer) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        owner = RawSseClient(http, agent_server.url, _bearer("tok-antigravity-x"))
        async with owner.connect():
            for query in (f"sessionId={owner.session_id}", f"session_id={owner.session_id.replace('-', '')}"):
                stolen = await http.post(
                    f"{agent_server.url}/mcp/message?{query}", json=PING, headers=_bearer("tok-claude-012345")
                )
                assert stolen.status_code == 404
            reply = await owner.call({**PING, "id": "mine"})
            assert reply["id"] == "mine", "the foreign request must not have reached this stream"


async def test_a_streamable_session_answers_only_the_token_that_opened_it(agent_server: LiveServer) -> None:
    url = f"{agent_server.url}/mcp"
    async with httpx.AsyncClient(timeout=10) as http:
        opened = await http.post(url, json=INITIALIZE, headers={**STREAMABLE_HEADERS, **_bearer("tok-antigravity-x")})
        assert opened.status_code == 200
        session = opened.headers["mcp-session-id"]
        headers = {**STREAMABLE_HEADERS, "mcp-session-id": session, "mcp-protocol-version": "2025-06-18"}
        stolen = await http.post(url, json=PING, headers={**headers, **_bearer("tok-claude-012345")})
        assert stolen.status_code == 404
        mine = await http.post(url, json=PING, headers={**headers, **_bearer("tok-antigravity-x")})
        assert mine.status_code == 200


async def test_a_token_bound_to_an_agent_writes_as_that_agent(agent_server: LiveServer) -> None:
    async with sse_session(agent_server.url, _bearer("tok-antigravity-x")) as client:
        stored = await client.call_tool("remember", {"content": "Bound tokens write their own scope"})
        assert stored.is_error is False, stored
        other = await client.call_tool("remember", {"content": "Not mine to write", "agent": "claude-code"})
        assert other.is_error is True
    async with streamable_session(agent_server.url, _bearer("tok-claude-012345")) as client:
        listed = await client.call_tool("list_facts", {"agent": "antigravity"})
        memories: list[dict[str, Any]] = payload(listed)["memories"]
        assert [m["agent"] for m in memories] == ["antigravity"]


async def test_a_credential_whose_sessions_are_all_busy_is_refused_and_another_is_not(
    make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    with run_server(make_settings(max_sessions=1)) as server:
        url = f"{server.url}/mcp"
        async with httpx.AsyncClient(timeout=10) as http:
            opened = await http.post(url, json=INITIALIZE, headers=STREAMABLE_HEADERS)
            headers = {"accept": "text/event-stream", "mcp-session-id": opened.headers["mcp-session-id"],
                       "mcp-protocol-version": "2025-06-18"}
            # An open GET stream keeps the session busy, so it cannot give way.
            async with http.stream("GET", url, headers=headers) as stream:
                assert stream.status_code == 200
                refused = await http.post(url, json=INITIALIZE, headers=STREAMABLE_HEADERS)
                other = await http.post(url, json=INITIALIZE, headers={**STREAMABLE_HEADERS, "Authorization": "x"})
    assert refused.status_code == 503
    assert refused.json()["code"] == "too_many_sessions"
    assert refused.headers["retry-after"] == "5"
    assert other.status_code == 200
