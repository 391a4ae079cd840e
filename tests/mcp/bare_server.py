"""The MCP front end alone under a real uvicorn, without the edge guard, to test the SDK's own checks."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

from fastapi import FastAPI

from app.container import Services
from app.mcp.front_end import McpFrontEnd
from app.settings import Settings
from tests.support.server import serve_asgi


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
    with serve_asgi(app, startup_timeout=30) as (port, _server):
        yield f"http://127.0.0.1:{port}"
