"""An accepted legacy SSE call runs to completion, once, though its client closes the stream meanwhile."""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field

import anyio
import httpx
from fastapi import FastAPI
from mcp.server.mcpserver import MCPServer
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.routing import Route

from app.mcp.front_end import _Endpoint, transport_security
from app.mcp.legacy_sse import LegacySseTransport
from app.settings import Settings
from tests.support.server import serve_asgi


@dataclass
class HeldTool:
    """A tool that runs until the test releases it, and records each call that completed."""

    release: threading.Event = field(default_factory=threading.Event)
    started: threading.Event = field(default_factory=threading.Event)
    completed: list[str] = field(default_factory=list)


@contextmanager
def serve_held_tool(tool: HeldTool) -> Iterator[str]:
    server = MCPServer("held")

    @server.tool()
    async def hold(label: str) -> str:
        tool.started.set()
        await anyio.to_thread.run_sync(tool.release.wait)
        tool.completed.append(label)
        return label

    security = transport_security(Settings(embedding_provider="hash"))
    server.streamable_http_app(transport_security=security)
    one_shot = StreamableHTTPSessionManager(app=server.session_manager.app, stateless=True, json_response=True,
                                            security_settings=security)
    legacy = LegacySseTransport(server.session_manager.app, security, one_shot, message_path="/mcp/message",
                                max_streams=4, max_body_bytes=1 << 20)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with one_shot.run():
            yield

    app = FastAPI(lifespan=lifespan)
    app.router.routes.append(Route("/mcp/sse", endpoint=_Endpoint(legacy.handle_stream)))
    app.router.routes.append(Route("/mcp/message", endpoint=_Endpoint(legacy.handle_message)))
    with serve_asgi(app, startup_timeout=30) as (port, _server):
        yield f"http://127.0.0.1:{port}"


def test_a_call_accepted_with_202_completes_after_its_stream_closed() -> None:
    tool = HeldTool()
    with serve_held_tool(tool) as base, httpx.Client(timeout=30) as http:
        with http.stream("GET", f"{base}/mcp/sse", headers={"Accept": "text/event-stream"}) as sse:
            lines = sse.iter_lines()
            assert next(lines) == "event: endpoint"
            endpoint = base + next(lines).removeprefix("data: ")
            call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                    "params": {"name": "hold", "arguments": {"label": "accepted"}}}
            assert http.post(endpoint, json=call).status_code == 202
            assert tool.started.wait(10)
        # The stream is closed while the call runs; once the server has seen that, a ping on the same
        # session is refused with 410 (its reply could reach nobody) instead of accepted with 202.
        ping = {"jsonrpc": "2.0", "id": "probe", "method": "ping"}
        deadline = time.monotonic() + 10
        while http.post(endpoint, json=ping).status_code != 410:
            assert time.monotonic() < deadline, "the server never saw the stream close"
            time.sleep(0.05)  # polling the server's view of the stream, bounded by the deadline
        tool.release.set()
        deadline = time.monotonic() + 10
        while not tool.completed:
            assert time.monotonic() < deadline, "the accepted call was cancelled with its stream"
            time.sleep(0.05)  # polling for the drained call, bounded by the deadline
    assert tool.completed == ["accepted"]
