"""Wires settings, services and adapters into one ASGI app: the only module that knows every part."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

from fastapi import FastAPI

from app import __version__, gc_pause, heap
from app.container import Services
from app.edge.guard import EdgeGuard
from app.errors import AppError
from app.kanban.service import KanbanService
from app.logging_setup import configure_logging
from app.mcp.front_end import McpFrontEnd
from app.memory.service import MemoryService
from app.rest import health, kanban, memory
from app.rest.errors import install_error_handlers
from app.settings import Settings
from app.web import events as web_events
from app.web import routes as web

logger = logging.getLogger(__name__)


def create_app(settings: Settings | None = None, *, freeze_startup_objects: bool = False) -> FastAPI:
    """Build a fresh app; each call gets its own MCP server (its session manager runs once).

    ``freeze_startup_objects``: once started, exempt what start-up left alive from garbage
    collection (``gc_pause``); for the one app of a server process, not for apps inside tests.
    """
    settings = settings or Settings()
    configure_logging(settings)
    services = Services()
    mcp_front = McpFrontEnd(services, settings)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            try:
                services.memory = await stack.enter_async_context(MemoryService.open(settings))
                stack.callback(setattr, services, "memory", None)
                services.kanban = await stack.enter_async_context(KanbanService.open(settings))
                stack.callback(setattr, services, "kanban", None)
            except AppError as exc:
                # The one line an operator needs (model mismatch, unusable store, unsafe job script).
                logger.error("memory-mcp cannot start: %s", exc.message)
                raise
            await stack.enter_async_context(mcp_front.run())
            await stack.enter_async_context(heap.trimmed_periodically())
            if freeze_startup_objects:
                stack.enter_context(gc_pause.startup_objects_frozen())
            base = local_base_url(settings.host, settings.port)
            logger.info("memory-mcp ready: dashboard %s/ · MCP %s/mcp (Streamable HTTP) · %s/mcp/sse (legacy SSE)",
                        base, base, base)
            yield
            logger.info("memory-mcp shutting down")

    app = FastAPI(
        title="memory-mcp",
        version=__version__,
        summary="Shared semantic memory and kanban board for AI coding agents",
        lifespan=lifespan,
    )
    app.state.services = services
    app.state.settings = settings
    install_error_handlers(app)
    app.include_router(health.router)
    app.include_router(memory.router)
    app.include_router(kanban.router)
    app.include_router(web.router)
    app.include_router(web_events.router_for(services))
    mcp_front.install(app)
    app.add_middleware(EdgeGuard, settings=settings)
    return app


def local_base_url(host: str, port: int) -> str:
    """The URL to paste on this machine: a wildcard bind is reached through loopback."""
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
