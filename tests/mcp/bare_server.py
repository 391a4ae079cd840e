"""The MCP front end alone under a real uvicorn, without the edge guard, to test the SDK's own checks."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

import uvicorn
from fastapi import FastAPI

from app.container import Services
from app.mcp.front_end import McpFrontEnd
from app.settings import Settings


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = threading.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.ready.set()

    def install_signal_handlers(self) -> None:
        """Signals belong to pytest's main thread."""


@contextmanager
def serve_front_end_only(settings: Settings) -> Iterator[str]:
    """Serve only the MCP routes (no services, no guard) on 127.0.0.1; yields the base URL."""
    front = McpFrontEnd(Services(), settings)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with front.run():
            yield

    app = FastAPI(lifespan=lifespan)
    front.install(app)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    server = _Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=3))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    if not server.ready.wait(30):
        raise RuntimeError("bare MCP server did not start")
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
