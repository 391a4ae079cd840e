"""One URL, two endpoint forms: the specification's ``requests`` client and the official SDK clients at ``/mcp/sse``."""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests

from app.cli import main
from app.mcp import legacy_sse
from app.mcp.legacy_sse import endpoint_form
from app.settings import Settings
from tests.conftest import SettingsFactory
from tests.mcp.clients import EXPECTED_TOOLS, payload, sse_session
from tests.support.server import LiveServer, run_server

# The client of the project's specification, character for character; tests change only the port.
SPEC_CLIENT = """\
import json
import requests

# open the connection, get the sessionId
sse = requests.get("http://localhost:3002/mcp/sse", stream=True)
for line in sse.iter_lines():
    if line.startswith(b"data:"):
        endpoint = json.loads(line[5:])["uri"]
        session_id = endpoint.split("sessionId=")[1]
        break

# call a tool
resp = requests.post(
    f"http://localhost:3002/mcp/message?sessionId={session_id}",
    json={"jsonrpc":"2.0","id":1,"method":"tools/call",
          "params":{"name":"recall","arguments":{"query":"MCP 記憶"}}}
)
"""
FACT = "MCP 記憶: memories are shared by every agent on this machine"
DASHED_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}"
TS_SDK_DIR = Path.home() / ".cache" / "memory-mcp-tests" / "node"
TS_SDK_SPEC = "@modelcontextprotocol/sdk@1"
NODE, NPM = shutil.which("node"), shutil.which("npm")


def remember(base: str, content: str) -> str:
    """Store a fact through a session-less POST (answered in the body) and return its id."""
    params = {"name": "remember", "arguments": {"content": content}}
    call = {"jsonrpc": "2.0", "id": 0, "method": "tools/call", "params": params}
    reply = requests.post(f"{base}/mcp/message", json=call, timeout=30).json()
    memory_id: str = reply["result"]["structuredContent"]["memory_id"]
    return memory_id


def recalled(reply: dict[str, Any]) -> list[str]:
    """The contents a recall reply carries in ``content[0].text``, the part a raw client reads."""
    assert reply["id"] == 1 and reply["jsonrpc"] == "2.0", reply
    return [memory["content"] for memory in json.loads(reply["result"]["content"][0]["text"])["memories"]]


def first_event(base: str, headers: dict[str, str]) -> tuple[str, str]:
    """The ``event:`` and ``data:`` lines that open a ``GET /mcp/sse`` with these headers."""
    with httpx.Client(timeout=10) as http, http.stream("GET", f"{base}/mcp/sse", headers=headers) as response:
        lines = response.iter_lines()
        return next(lines), next(lines)


def closed_session(base: str, headers: dict[str, str] | None = None) -> str:
    """The id of a session whose stream was opened as a stream reader, then closed, once the server saw it close.

    While such a stream is open a ping on its session is accepted (202); once the server has seen it
    close, it is refused with 410 ``session_closed``.
    """
    _, data = first_event(base, {"Accept": "text/event-stream", **(headers or {})})
    session_id = data.split("sessionId=")[1]
    deadline = time.monotonic() + 10
    ping = {"jsonrpc": "2.0", "id": "probe", "method": "ping"}
    while time.monotonic() < deadline:
        url = f"{base}/mcp/message?sessionId={session_id}"
        if requests.post(url, json=ping, headers=headers, timeout=10).status_code == 410:
            return session_id
        time.sleep(0.05)  # back-off between probes of the server thread's state, bounded by the deadline
    raise AssertionError("the server never saw the stream close")


def step_three(lines: Iterator[bytes], request_id: Any) -> dict[str, Any]:
    """Step 3 of the specification's flow: the ``event: message`` carrying the reply, from the stream's lines.

    ``lines`` is the one ``iter_lines()`` of the stream kept from step 1: leaving a requests line iterator
    (a ``break``) closes the connection, so a reader keeps the iterator.
    """
    event = b""
    for line in lines:
        if line.startswith(b"event:"):
            event = line[6:].strip()
        elif line.startswith(b"data:") and event == b"message":
            message: dict[str, Any] = json.loads(line[5:])
            if message.get("id") == request_id:
                return message
    raise AssertionError("the stream ended before the reply")


def endpoint_of(lines: Iterator[bytes]) -> str:
    """Step 1: the endpoint event's path, in either form."""
    data = next(line for line in lines if line.startswith(b"data:"))[5:].strip().decode()
    return str(json.loads(data)["uri"]) if data.startswith("{") else data


# --- the specification's client ------------------------------------------------------------------


def test_the_spec_flow_read_with_requests_defaults_gets_a_202_and_its_reply_on_the_stream(
    live_server: LiveServer,
) -> None:
    base = live_server.url
    remember(base, FACT)
    sse = requests.get(f"{base}/mcp/sse", stream=True, timeout=30)
    try:
        lines = sse.iter_lines()
        endpoint = endpoint_of(lines)
        session_id = endpoint.split("sessionId=")[1]
        resp = requests.post(
            f"{base}/mcp/message?sessionId={session_id}",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                  "params": {"name": "recall", "arguments": {"query": "MCP 記憶"}}},
            timeout=30,
        )
        reply = step_three(lines, 1)
    finally:
        sse.close()

    assert sse.headers["content-type"].startswith("text/event-stream")
    assert endpoint.startswith("/mcp/message?sessionId=")
    assert re.fullmatch(DASHED_UUID, session_id)
    assert resp.status_code == 202  # 202 Accepted（回應透過 SSE 推送）
    assert "jsonrpc" not in resp.text  # the reply is on the stream only
    assert recalled(reply)[0] == FACT


def stored_contents(base: str) -> list[str]:
    listed = requests.get(f"{base}/api/lancedb/memories", params={"limit": 200}, timeout=30)
    assert listed.status_code == 200, listed.text
    return [memory["text"] for memory in listed.json()]


def test_the_spec_snippet_verbatim_is_accepted_and_stored_once_or_told_its_stream_is_gone(
    live_server: LiveServer,
) -> None:
    """The snippet's ``break`` closes its stream (requests does on leaving the line iterator), racing its POST:
    accepted (202) calls run to completion exactly once; a POST after the server saw the close is a 410."""
    runs = 30
    snippet = SPEC_CLIENT.replace("localhost:3002", f"localhost:{live_server.port}").replace(
        '"params":{"name":"recall","arguments":{"query":"MCP 記憶"}}}',
        '"params":{"name":"remember","arguments":{"content":CONTENT}}}',
    )
    assert "remember" in snippet
    outcomes: dict[int, requests.Response] = {}
    for run in range(runs):
        names: dict[str, Any] = {"CONTENT": f"snippet run {run}: the stream was left by a break"}
        try:
            exec(snippet, names)  # verbatim apart from the tool
            outcomes[run] = names["resp"]
        finally:
            names["sse"].close()

    accepted = {run for run, resp in outcomes.items() if resp.status_code == 202}
    refused = {run for run, resp in outcomes.items() if resp.status_code == 410}
    assert accepted | refused == set(range(runs)), {run: resp.status_code for run, resp in outcomes.items()}
    assert all(outcomes[run].json()["code"] == "session_closed" for run in refused)
    expected = {run: int(run in accepted) for run in range(runs)}
    deadline = time.monotonic() + 30
    while True:
        stored = stored_contents(live_server.url)
        counts = {run: stored.count(f"snippet run {run}: the stream was left by a break") for run in range(runs)}
        if counts == expected or time.monotonic() > deadline:
            break
        time.sleep(0.05)  # polling the REST list until the drained calls have landed, bounded by the deadline
    assert counts == expected


def test_an_sdk_style_call_accepted_with_202_runs_once_though_the_stream_closes_at_once(
    live_server: LiveServer,
) -> None:
    runs = 10
    headers = {"Accept": "text/event-stream"}
    for run in range(runs):
        with httpx.Client(timeout=30) as http, http.stream("GET", f"{live_server.url}/mcp/sse", headers=headers) as sse:
            lines = sse.iter_lines()
            assert next(lines) == "event: endpoint"
            endpoint = next(lines).removeprefix("data: ")
            call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                    "params": {"name": "remember", "arguments": {"content": f"accepted run {run}"}}}
            accepted = http.post(f"{live_server.url}{endpoint}", json=call)
        # the stream is closed here, right after the 202: the call must still complete
        assert accepted.status_code == 202

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        stored = stored_contents(live_server.url)
        if all(f"accepted run {run}" in stored for run in range(runs)):
            break
        time.sleep(0.05)  # polling the REST list until the drained calls have landed, bounded by the deadline
    assert sorted(stored) == sorted(f"accepted run {run}" for run in range(runs))


# The headers of the clients people run: Claude Code 2.1.197's as captured on the wire; the SDKs' as their
# SSE transports send them; requests' and curl's defaults.
CLIENT_HEADERS = {
    "claude-code": (
        {"Accept": "text/event-stream", "Accept-Encoding": "identity", "User-Agent": "claude-code/2.1.197 (sdk-cli)"},
        {"Accept": "application/json, text/event-stream", "Accept-Encoding": "identity",
         "Content-Type": "application/json", "User-Agent": "claude-code/2.1.197 (sdk-cli)",
         "mcp-protocol-version": "2025-11-25"},
    ),
    "typescript-sdk": ({"Accept": "text/event-stream"}, {"content-type": "application/json"}),
    "python-sdk": ({"Accept": "text/event-stream"}, {"content-type": "application/json"}),
    "requests-defaults": ({}, {"Content-Type": "application/json"}),  # what requests' json= sends
    "curl": ({"Accept": "*/*", "User-Agent": "curl/7.88.1"}, {"Accept": "*/*", "Content-Type": "application/json"}),
    "json-only-post": (
        {"Accept": "text/event-stream"}, {"Accept": "application/json", "Content-Type": "application/json"}
    ),
}


@pytest.mark.parametrize("client", sorted(CLIENT_HEADERS))
def test_every_client_gets_202_and_its_replies_on_the_stream_whatever_its_accept_headers(
    live_server: LiveServer, client: str
) -> None:
    get_headers, post_headers = CLIENT_HEADERS[client]
    remember(live_server.url, FACT)
    sse = requests.get(f"{live_server.url}/mcp/sse", stream=True, headers=get_headers, timeout=30)
    try:
        lines = sse.iter_lines()
        url = f"{live_server.url}{endpoint_of(lines)}"
        initialize = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                      "params": {"protocolVersion": "2024-11-05", "capabilities": {},
                                 "clientInfo": {"name": client, "version": "1"}}}
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "recall", "arguments": {"query": "MCP 記憶"}}}

        def post(message: dict[str, Any]) -> requests.Response:
            response = requests.post(url, data=json.dumps(message), headers=post_headers, timeout=30)
            assert response.status_code == 202, (response.status_code, response.text)
            assert "jsonrpc" not in response.text  # the reply goes on the stream only
            return response

        post(initialize)
        initialized = step_three(lines, 0)
        post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        post(call)
        reply = step_three(lines, 1)
    finally:
        sse.close()
    assert initialized["result"]["serverInfo"]["name"]
    assert recalled(reply)[0] == FACT


def test_a_closed_stream_of_another_credential_stays_not_found(make_settings: SettingsFactory) -> None:
    settings = make_settings(agent_tokens={"tok-owner-012345": "owner", "tok-other-012345": "other"})
    with run_server(settings) as live:
        owner, other = ({"Authorization": f"Bearer {token}"} for token in ("tok-owner-012345", "tok-other-012345"))
        session_id = closed_session(live.url, owner)
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        stolen = requests.post(f"{live.url}/mcp/message?sessionId={session_id}", json=ping, headers=other, timeout=10)
    assert stolen.status_code == 404
    assert stolen.json()["code"] == "session_not_found"


def test_a_stream_closed_longer_ago_than_the_memory_is_not_found(
    live_server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Clock:
        offset = 0.0

        def monotonic(self) -> float:
            return time.monotonic() + self.offset

    clock = Clock()
    monkeypatch.setattr(legacy_sse, "time", clock)
    session_id = closed_session(live_server.url)
    clock.offset = legacy_sse.CLOSED_SESSION_MEMORY_S + 1
    ping = {"jsonrpc": "2.0", "id": 3, "method": "ping"}
    late = requests.post(f"{live_server.url}/mcp/message?sessionId={session_id}", json=ping, timeout=10)
    assert late.status_code == 404
    assert late.json()["code"] == "session_not_found"


# --- the rule and the setting ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("accept", "form"),
    [
        ([b"text/event-stream"], "path"),  # python-sdk sse_client, TypeScript SSEClientTransport, EventSource
        ([b"application/json, TEXT/Event-Stream;q=0.5"], "path"),
        ([b"application/json", b"text/event-stream"], "path"),
        ([b"*/*"], "json"),  # python requests, curl, httpx
        ([b"text/*"], "json"),
        ([b"application/json"], "json"),
        ([], "json"),
    ],
)
def test_auto_gives_the_plain_path_only_when_accept_names_text_event_stream(accept: list[bytes], form: str) -> None:
    headers = [(b"host", b"localhost"), *((b"accept", value) for value in accept)]
    assert endpoint_form(headers, "auto") == form
    assert endpoint_form(headers, "path") == "path"
    assert endpoint_form(headers, "json") == "json"


@pytest.mark.parametrize(
    ("setting", "accept", "expected"),
    [("json", "text/event-stream", '{"uri": "/mcp/message?sessionId='), ("path", "*/*", "/mcp/message?sessionId=")],
)
def test_the_setting_forces_one_form_whatever_the_accept_header(
    make_settings: SettingsFactory, setting: str, accept: str, expected: str
) -> None:
    with run_server(make_settings(sse_endpoint_format=setting)) as live:
        event, data = first_event(live.url, {"Accept": accept})
    assert event == "event: endpoint"
    assert data.startswith(f"data: {expected}")


def test_the_setting_is_read_from_the_environment_and_a_bad_value_stops_serve(
    make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MEMORY_MCP_SSE_ENDPOINT_FORMAT", " JSON ")
    assert Settings(_env_file=None).sse_endpoint_format == "json"  # type: ignore[call-arg]
    monkeypatch.setenv("MEMORY_MCP_SSE_ENDPOINT_FORMAT", "uri")
    assert main(["serve", "--port", "0"]) == 2
    assert "MEMORY_MCP_SSE_ENDPOINT_FORMAT must be auto, path or json, got 'uri'" in capsys.readouterr().err


# --- the official clients at the same URL ----------------------------------------------------------


async def test_the_python_sdk_sse_client_works_at_the_same_url(live_server: LiveServer) -> None:
    remember(live_server.url, FACT)
    async with sse_session(live_server.url) as client:
        found = await client.call_tool("recall", {"query": "MCP 記憶"})
    assert found.is_error is False
    assert payload(found)["memories"][0]["content"] == FACT


@pytest.fixture(scope="module")
def ts_sdk_modules() -> Iterator[Path]:
    """``@modelcontextprotocol/sdk@1`` installed with npm into a cache outside the repository (once)."""
    assert NPM is not None
    package = TS_SDK_DIR / "node_modules" / "@modelcontextprotocol" / "sdk" / "package.json"
    TS_SDK_DIR.mkdir(parents=True, exist_ok=True)
    # One install at a time: parallel test workers (or two checkouts) share this cache.
    with (TS_SDK_DIR / ".install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not package.exists():
            install = [NPM, "install", "--prefix", str(TS_SDK_DIR), "--no-audit", "--no-fund", TS_SDK_SPEC]
            done = subprocess.run(install, capture_output=True, text=True, timeout=240, check=False)
            assert done.returncode == 0, f"npm install {TS_SDK_SPEC} failed:\n{done.stderr}"
    assert json.loads(package.read_text(encoding="utf-8"))["version"].startswith("1.")
    yield TS_SDK_DIR / "node_modules"


if NODE is not None and NPM is not None:  # collected wherever a node runtime exists (CI has one)

    def test_the_typescript_sdk_sse_client_works_at_the_same_url(live_server: LiveServer, ts_sdk_modules: Path) -> None:
        assert NODE is not None
        script = Path(__file__).with_name("ts_sse_client.cjs")
        env = {**os.environ, "NODE_PATH": str(ts_sdk_modules)}
        done = subprocess.run(
            [NODE, str(script), f"{live_server.url}/mcp/sse", FACT],
            capture_output=True, text=True, timeout=120, env=env, check=False,
        )
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert set(result["tools"]) == EXPECTED_TOOLS
        assert result["stored"]["isError"] is False
        memory_id = result["stored"]["structuredContent"]["memory_id"]
        assert result["found"]["structuredContent"]["memories"][0]["memory_id"] == memory_id
