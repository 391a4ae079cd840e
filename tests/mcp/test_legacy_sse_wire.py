"""The legacy HTTP+SSE wire format, pinned byte for byte where clients depend on it."""

from __future__ import annotations

import re
from uuid import UUID

import httpx
import pytest

from app.mcp.legacy_sse import WireFormatChanged, _rewrite_endpoint
from tests.mcp.clients import RawSseClient, poll_until, tool_call
from tests.support.server import LiveServer

ENDPOINT = re.compile(r"^/mcp/message\?sessionId=[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}$")


def test_the_sdk_endpoint_event_is_rewritten_to_the_typescript_sdk_form() -> None:
    session = UUID("12da26f1-8f3a-45f8-84bb-f8728a4a9010")
    sdk_event = b"event: endpoint\r\ndata: /mcp/message?session_id=" + session.hex.encode() + b"\r\n\r\n"
    parsed, rewritten = _rewrite_endpoint(sdk_event)
    assert parsed == session
    assert rewritten == b"event: endpoint\r\ndata: /mcp/message?sessionId=12da26f1-8f3a-45f8-84bb-f8728a4a9010\r\n\r\n"


@pytest.mark.parametrize(
    "event",
    [
        b"event: endpoint\r\ndata: /mcp/message?sessionId=12da26f1-8f3a-45f8-84bb-f8728a4a9010\r\n\r\n",
        b"event: endpoint\r\ndata: /mcp/message?session_id=12da26f18f3a45f884bbf8728a4a9010&x=1\r\n\r\n",
        b'event: message\r\ndata: {"jsonrpc": "2.0"}\r\n\r\n',
    ],
)
def test_an_endpoint_event_in_another_format_fails_loudly(event: bytes) -> None:
    with pytest.raises(WireFormatChanged):
        _rewrite_endpoint(event)


async def test_first_event_is_the_bare_relative_endpoint_with_a_dashed_session_id(live_server: LiveServer) -> None:
    sdk_accept = {"Accept": "text/event-stream"}  # what the SDK clients send; others get the JSON form
    async with (
        httpx.AsyncClient(timeout=10) as http,
        http.stream("GET", f"{live_server.url}/mcp/sse", headers=sdk_accept) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = response.aiter_lines()
        assert await anext(lines) == "event: endpoint"
        data = await anext(lines)
        assert data.startswith("data: ")
        assert ENDPOINT.match(data.removeprefix("data: ")), data


async def test_raw_client_calls_a_tool_after_initialize(live_server: LiveServer) -> None:
    async with httpx.AsyncClient(timeout=10) as http, RawSseClient(http, live_server.url).connect() as raw:
        await raw.initialize()
        reply = await raw.call(tool_call(1, "list_facts", {}))
        assert reply["result"]["isError"] is False
        assert reply["result"]["structuredContent"]["memories"] == []


async def test_raw_client_calls_tools_without_initialize(live_server: LiveServer) -> None:
    async with httpx.AsyncClient(timeout=10) as http, RawSseClient(http, live_server.url).connect() as raw:
        listed = await raw.call({"jsonrpc": "2.0", "id": "a", "method": "tools/list"})
        assert len(listed["result"]["tools"]) == 11
        reply = await raw.call(tool_call("b", "list_facts", {"limit": 5}))
        assert reply["result"]["isError"] is False
        # The implicit initialize stays invisible: the next event is nothing but our own traffic.
        pong = await raw.call({"jsonrpc": "2.0", "id": "c", "method": "ping"})
        assert pong == {"jsonrpc": "2.0", "id": "c", "result": {}}


@pytest.mark.parametrize("form", ["session_id={dashed}", "session_id={hex}", "sessionId={hex}", "sessionId={dashed}"])
async def test_both_parameter_names_and_both_id_forms_reach_the_session(live_server: LiveServer, form: str) -> None:
    async with httpx.AsyncClient(timeout=10) as http, RawSseClient(http, live_server.url).connect() as raw:
        session = UUID(raw.session_id)
        query = form.format(dashed=str(session), hex=session.hex)
        reply = await raw.call({"jsonrpc": "2.0", "id": 7, "method": "ping"}, query=query)
        assert reply["result"] == {}


async def test_unknown_session_is_404_with_a_json_body(live_server: LiveServer) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        for session in ("0f0e4f49-5a2f-4d0c-9b36-1f6c1d7cb3a1", "0f0e4f495a2f4d0c9b361f6c1d7cb3a1", "not-a-session"):
            response = await http.post(
                f"{live_server.url}/mcp/message?sessionId={session}", json={"jsonrpc": "2.0", "id": 1, "method": "ping"}
            )
            assert response.status_code == 404
            assert response.json()["code"] == "session_not_found"


async def test_an_empty_session_id_is_400_with_a_json_body(live_server: LiveServer) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        for query in ("sessionId=", "session_id="):
            response = await http.post(
                f"{live_server.url}/mcp/message?{query}", json={"jsonrpc": "2.0", "id": 1, "method": "ping"}
            )
            assert response.status_code == 400
            assert response.json()["code"] == "missing_session_id"


async def test_trailing_slashes_are_served_without_a_redirect(live_server: LiveServer) -> None:
    async with (
        httpx.AsyncClient(timeout=10, follow_redirects=False) as http,
        RawSseClient(http, live_server.url).connect() as raw,
    ):
        response = await http.post(
            f"{live_server.url}/mcp/message/?sessionId={raw.session_id}",
            json={"jsonrpc": "2.0", "id": 3, "method": "ping"},
        )
        assert response.status_code == 202
        assert (await raw.reply_to(3))["result"] == {}
        one_shot = await http.post(
            f"{live_server.url}/mcp/message/", json={"jsonrpc": "2.0", "id": 4, "method": "ping"}
        )
        assert one_shot.status_code == 200
        streamable = await http.post(
            f"{live_server.url}/mcp/",
            json={"jsonrpc": "2.0", "id": 5, "method": "ping"},
            headers={"accept": "application/json, text/event-stream"},
        )
        assert streamable.status_code not in (301, 302, 307, 308)


async def test_a_request_without_any_session_is_answered_in_the_body(live_server: LiveServer) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.post(f"{live_server.url}/mcp/message", json=tool_call(9, "list_facts", {}))
        assert response.status_code == 200
        body = response.json()
        assert body["id"] == 9
        assert body["result"]["isError"] is False
        listed = await http.post(
            f"{live_server.url}/mcp/message", json={"jsonrpc": "2.0", "id": 10, "method": "tools/list"}
        )
        assert len(listed.json()["result"]["tools"]) == 11


async def test_a_notification_without_any_session_is_accepted_with_an_empty_body(live_server: LiveServer) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.post(
            f"{live_server.url}/mcp/message", json={"jsonrpc": "2.0", "method": "notifications/initialized"}
        )
        assert response.status_code == 202
        assert response.content == b""


async def test_unknown_method_is_method_not_found_on_the_stream(live_server: LiveServer) -> None:
    async with httpx.AsyncClient(timeout=10) as http, RawSseClient(http, live_server.url).connect() as raw:
        await raw.initialize()
        reply = await raw.call({"jsonrpc": "2.0", "id": 11, "method": "no/such_method"})
        assert reply["error"]["code"] == -32601


async def test_a_closed_stream_forgets_its_session_and_refuses_its_messages_with_410_naming_it(
    live_server: LiveServer,
) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        async with RawSseClient(http, live_server.url).connect() as raw:
            endpoint, session_id = raw.endpoint, raw.session_id

        async def status() -> int:
            ping = {"jsonrpc": "2.0", "id": "p", "method": "ping"}
            return (await http.post(f"{live_server.url}{endpoint}", json=ping)).status_code

        # The server sees the disconnect on its own schedule: poll that external fact, bounded.
        # Until then a message still goes to the session (202); from then on it is refused, never answered
        # in a body that no client of this transport reads.
        assert await poll_until(status, lambda code: code == 410) == 410
        refused = await http.post(f"{live_server.url}{endpoint}", json=tool_call(5, "remember", {"content": "lost?"}))
        listed = await http.get(f"{live_server.url}/api/lancedb/memories")
    assert refused.status_code == 410
    assert refused.json()["code"] == "session_closed"
    assert session_id in refused.json()["detail"]
    assert listed.json() == []
