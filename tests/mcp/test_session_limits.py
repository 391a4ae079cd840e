"""Session limits are per credential: abandoned sessions of one token cost that token its oldest idle ones."""

from __future__ import annotations

import httpx
import pytest

from app.edge import leases
from tests.conftest import SettingsFactory
from tests.mcp.clients import RawSseClient, streamable_session
from tests.support.server import run_server

STREAMABLE_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
PING = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
TOKENS = {"tok-abandoner-0123": "abandoner", "tok-worker-01234": "worker"}


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _session_headers(session_id: str, token: str) -> dict[str, str]:
    return {**STREAMABLE_HEADERS, **_bearer(token), "mcp-session-id": session_id, "mcp-protocol-version": "2025-06-18"}


async def test_80_abandoned_streamable_sessions_of_one_token_lock_nobody_out(make_settings: SettingsFactory) -> None:
    abandoned = 80
    assert abandoned > make_settings().max_sessions
    with run_server(make_settings(agent_tokens=TOKENS)) as server:
        url = f"{server.url}/mcp"
        async with httpx.AsyncClient(timeout=10) as http:
            headers = {**STREAMABLE_HEADERS, **_bearer("tok-abandoner-0123")}
            opened = [await http.post(url, json=INITIALIZE, headers=headers) for _ in range(abandoned)]
            ids = [response.headers["mcp-session-id"] for response in opened]
            oldest = await http.post(url, json=PING, headers=_session_headers(ids[0], "tok-abandoner-0123"))
            newest = await http.post(url, json=PING, headers=_session_headers(ids[-1], "tok-abandoner-0123"))
        # Another token initializes, lists and calls at once through the official client.
        async with streamable_session(server.url, _bearer("tok-worker-01234")) as client:
            tools = await client.list_tools()
            called = await client.call_tool("list_facts", {})
    assert [response.status_code for response in opened] == [200] * abandoned
    assert oldest.status_code == 404  # the least recently used gave way to the 65th
    assert newest.status_code == 200
    assert len(tools.tools) == 11
    assert called.is_error is False


async def test_a_streamable_session_of_another_token_with_the_same_agent_is_not_found(
    make_settings: SettingsFactory,
) -> None:
    tokens = {"tok-same-agent-a": "antigravity", "tok-same-agent-b": "antigravity"}
    with run_server(make_settings(agent_tokens=tokens)) as server:
        url = f"{server.url}/mcp"
        async with httpx.AsyncClient(timeout=10) as http:
            headers = {**STREAMABLE_HEADERS, **_bearer("tok-same-agent-a")}
            opened = await http.post(url, json=INITIALIZE, headers=headers)
            session_id = opened.headers["mcp-session-id"]
            stolen = await http.post(url, json=PING, headers=_session_headers(session_id, "tok-same-agent-b"))
            mine = await http.post(url, json=PING, headers=_session_headers(session_id, "tok-same-agent-a"))
            async with RawSseClient(http, server.url, _bearer("tok-same-agent-a")).connect() as raw:
                sse_stolen = await http.post(f"{server.url}{raw.endpoint}", json=PING,
                                             headers=_bearer("tok-same-agent-b"))
    assert stolen.status_code == 404
    assert stolen.json()["code"] == "session_not_found"
    assert mine.status_code == 200
    assert sse_stolen.status_code == 404
    assert sse_stolen.json()["code"] == "session_not_found"


async def test_a_legacy_stream_past_the_limit_ends_the_oldest_idle_one_of_that_token(
    make_settings: SettingsFactory,
) -> None:
    with run_server(make_settings(agent_tokens=TOKENS, max_sessions=2)) as server:
        async with httpx.AsyncClient(timeout=10) as http:
            mine = _bearer("tok-abandoner-0123")
            first, second, third = (RawSseClient(http, server.url, mine) for _ in range(3))
            async with first.connect(), second.connect(), third.connect():
                # The first stream was ended for the third: its reader sees the end of the stream.
                with pytest.raises(EOFError):
                    await first.next_event()
                async with RawSseClient(http, server.url, _bearer("tok-worker-01234")).connect() as other:
                    assert other.session_id


async def test_200_abandoned_initializes_never_push_out_a_client_that_calls_every_10_s(
    make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No token: every local process is one credential. The lease clock is played, not waited for.
    now = [1_000.0]
    monkeypatch.setattr(leases, "clock", lambda: now[0])
    call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "list_facts", "arguments": {}}}
    with run_server(make_settings()) as server:
        url = f"{server.url}/mcp"
        async with httpx.AsyncClient(timeout=10) as http:
            opened = await http.post(url, json=INITIALIZE, headers=STREAMABLE_HEADERS)
            mine = {**STREAMABLE_HEADERS, "mcp-session-id": opened.headers["mcp-session-id"],
                    "mcp-protocol-version": "2025-06-18"}
            initialized = await http.post(url, json=INITIALIZED, headers=mine)
            calls, abandoned = [], []
            for number in range(200):
                if number % 100 == 0:  # 100 initializes in each 10 s: more than the limit between two calls
                    calls.append((await http.post(url, json=call, headers=mine)).status_code)
                now[0] += 0.1
                abandoned.append(await http.post(url, json=INITIALIZE, headers=STREAMABLE_HEADERS))
            calls.append((await http.post(url, json=call, headers=mine)).status_code)
            oldest = abandoned[0].headers["mcp-session-id"]
            gone = await http.post(url, json=PING, headers={**mine, "mcp-session-id": oldest})
    assert initialized.status_code == 202
    assert [response.status_code for response in abandoned] == [200] * 200
    assert calls == [200, 200, 200]
    assert gone.status_code == 404  # the limit was reached: abandoned sessions gave way, not the working one


async def test_a_session_that_only_finished_its_handshake_gives_way_before_one_that_called(
    make_settings: SettingsFactory,
) -> None:
    with run_server(make_settings(max_sessions=2)) as server:
        url = f"{server.url}/mcp"
        async with httpx.AsyncClient(timeout=10) as http:
            ids = []
            for _ in range(2):
                opened = await http.post(url, json=INITIALIZE, headers=STREAMABLE_HEADERS)
                ids.append(opened.headers["mcp-session-id"])
            worker, idle = ({**STREAMABLE_HEADERS, "mcp-session-id": i, "mcp-protocol-version": "2025-06-18"}
                            for i in ids)
            # The worker calls, then both finish the handshake: the worker is now the least recently used.
            assert (await http.post(url, json=PING, headers=worker)).status_code == 200
            assert (await http.post(url, json=INITIALIZED, headers=worker)).status_code == 202
            assert (await http.post(url, json=INITIALIZED, headers=idle)).status_code == 202
            await http.post(url, json=INITIALIZE, headers=STREAMABLE_HEADERS)
            worker_after = await http.post(url, json=PING, headers=worker)
            idle_after = await http.post(url, json=PING, headers=idle)
    assert worker_after.status_code == 200
    assert idle_after.status_code == 404
