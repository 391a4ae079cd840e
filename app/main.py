"""Wires settings, services and adapters into one ASGI app: the only module that knows every part.

The lifespan only starts the services' task (``app/startup.py``) and returns, so uvicorn listens within
a few seconds of the process start; the task imports what is heavy (LanceDB, the MCP SDK: about three
seconds; docs/performance.md, 'Start-up'), opens both stores and the MCP transports, opens the gate
every request but the probes waits at, and then waits for the model and the vector cache to load.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from types import ModuleType

from fastapi import FastAPI

from app import __version__, gc_pause
from app.changes import ChangeMarkers
from app.container import Services
from app.edge.guard import EdgeGuard
from app.errors import AppError
from app.logging_setup import configure_logging
from app.memory.service import MemoryService
from app.rest import health, kanban, memory
from app.rest.errors import install_error_handlers
from app.settings import Settings
from app.startup import STARTUP_FAILURE, Startup, StartupGate
from app.web import events as web_events
from app.web import routes as web

logger = logging.getLogger(__name__)

#: How long the gate stays closed for the saved vector index to be mapped (about a second at a million rows).
INDEX_MAP_WAIT_S = 10.0


def create_app(settings: Settings | None = None, *, freeze_startup_objects: bool = False) -> FastAPI:
    """Build a fresh app; each start builds its own MCP server (its session manager runs once).

    ``freeze_startup_objects``: once started, exempt what start-up left alive from garbage
    collection (``gc_pause``); for the one app of a server process, not for apps inside tests.
    """
    settings = settings or Settings()
    configure_logging(settings)
    services = Services()
    startup = Startup()
    markers = ChangeMarkers(services)  # one reading for the dashboard's stream and the MCP notifications

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            if freeze_startup_objects:
                stack.enter_context(gc_pause.startup_objects_frozen())
            startup.run(lambda: _run_services(app, settings, services, markers, startup, freeze_startup_objects))
            stack.push_async_callback(startup.stop)
            base = local_base_url(settings.host, settings.port)
            logger.info("memory-mcp listening (loading in the background; /readyz tells when done): "
                        "dashboard %s/ · MCP %s/mcp (Streamable HTTP) · %s/mcp/sse (legacy SSE)", base, base, base)
            try:
                yield
            except asyncio.CancelledError:
                if startup.failure is None:
                    raise
                return  # a failed start is ending the loop (status 3, logged); uvicorn need not log it again
            logger.info("memory-mcp shutting down")

    app = FastAPI(
        title="memory-mcp",
        version=__version__,
        summary="Shared semantic memory and kanban board for AI coding agents",
        lifespan=lifespan,
    )
    app.state.services = services
    app.state.settings = settings
    app.state.startup = startup
    install_error_handlers(app)
    app.include_router(health.router)
    app.include_router(memory.router)
    app.include_router(kanban.router)
    app.include_router(web.router)
    app.include_router(web_events.router_for(services, markers))
    # The MCP routes are added once the SDK is imported (_open_services); until then the gate holds them.
    app.add_middleware(StartupGate, startup=startup)
    app.add_middleware(EdgeGuard, settings=settings)
    return app


async def _run_services(app: FastAPI, settings: Settings, services: Services, markers: ChangeMarkers,
                        startup: Startup, freeze: bool) -> None:
    """Open everything, open the gate, wait for the loads, hold the services until the app stops."""
    try:
        async with AsyncExitStack() as stack:
            try:
                await _open_services(stack, app, settings, services, markers, startup)
            except Exception as exc:
                # The one line an operator needs (model mismatch, unusable store, unsafe job script).
                message = exc.message if isinstance(exc, AppError) else f"{type(exc).__name__}: {exc}"
                if not isinstance(exc, AppError):
                    logger.exception("start-up failed")
                logger.error("memory-mcp cannot start: %s", message)
                startup.mark_failed(message)
                raise
            # A saved index is mapped in a second or two: REST gets a quick 503 meanwhile and MCP waits at the
            # gate, rather than a recall waiting for it or scanning a million rows in LanceDB.
            await services.memory.index_mapped(INDEX_MAP_WAIT_S)
            startup.mark_open()
            await _finish_loading(services, startup, freeze)
            await startup.until_stopped()
    except Exception:
        if startup.failure is None:
            raise
        # Like uvicorn's own failed start: end the process with status 3 once the services are closed.
        asyncio.get_running_loop().call_soon(_exit_after_failed_start)


async def _open_services(stack: AsyncExitStack, app: FastAPI, settings: Settings, services: Services,
                         markers: ChangeMarkers, startup: Startup) -> None:
    services.memory = await stack.enter_async_context(MemoryService.open(settings, background=True))
    stack.callback(setattr, services, "memory", None)
    startup.done("memory")
    kanban_module = await asyncio.to_thread(importlib.import_module, "app.kanban.service")
    services.kanban = await stack.enter_async_context(kanban_module.KanbanService.open(settings))
    stack.callback(setattr, services, "kanban", None)
    startup.done("kanban")
    front_end: ModuleType = await asyncio.to_thread(importlib.import_module, "app.mcp.front_end")
    mcp_front = front_end.McpFrontEnd(services, settings, markers)
    mcp_front.install(app)
    app.state.mcp = mcp_front
    await stack.enter_async_context(mcp_front.run())
    startup.done("mcp")
    heap = await asyncio.to_thread(importlib.import_module, "app.heap")
    await stack.enter_async_context(heap.trimmed_periodically())


async def _finish_loading(services: Services, startup: Startup, freeze: bool) -> None:
    """Wait for the model and the vector cache, then say so once."""
    memory_service = services.memory
    await memory_service.loads.wait()
    if freeze:
        gc.freeze()  # what the background load left alive lives as long as the server (gc_pause)
    startup.mark_loaded()
    logger.info("memory-mcp ready: loaded in %.2fs (open after %.2fs): %s", startup.loaded_seconds or 0.0,
                startup.open_seconds or 0.0, _load_summary(memory_service.loads.times()))


def _load_summary(times: dict[str, float | None]) -> str:
    return ", ".join(f"{name} {'failed' if seconds is None else f'{seconds:.2f}s'}" for name, seconds in times.items())


def _exit_after_failed_start() -> None:
    # Raised in a loop callback, SystemExit ends the event loop and the process, as uvicorn's own does.
    raise SystemExit(STARTUP_FAILURE)


def local_base_url(host: str, port: int) -> str:
    """The URL to paste on this machine: a wildcard bind is reached through loopback."""
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
