"""Start-up in the background: the server answers ``/healthz`` first, everything else waits at a gate.

Why: importing LanceDB and the MCP SDK, opening the table, loading the model and the vector cache took
5 to 10 s before uvicorn listened, and a supervisor (or a client's restart loop) saw nothing until
then (docs/performance.md, 'Start-up'). Now the lifespan returns at once and a background task opens
the services; until they are open (a few seconds) :class:`StartupGate` holds MCP requests and answers
everything else at once with 503 ``starting`` and ``Retry-After``; ``/readyz`` says what is still loading.

Why two answers: the MCP SDK clients and Claude Code treat a failed ``initialize`` as a dead server and
do not ask again, so an MCP request waits (at most ``GATE_WAIT_S``, below Claude Code's 30 s connect
timeout) and then succeeds; REST callers (hooks with a short budget, the CLI, the dashboard) are better
served by a quick 503 they can retry than by a request that hangs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

logger = logging.getLogger(__name__)

#: How long an MCP request may wait for the services to open before it gets 503 ``starting``; opening
#: normally takes a few seconds (a LanceDB import and a table open), a recovery or a slow disk more.
GATE_WAIT_S = 20.0
#: Requests under these paths wait at the gate; all others are answered 503 at once.
WAITING_PREFIXES = ("/mcp",)
#: uvicorn's own exit status for a failed start; a start that fails in the background exits with it too.
STARTUP_FAILURE = 3
PROBE_PATHS = frozenset({"/healthz", "/readyz"})


class Startup:
    """Where the start of one app is: opening (gate closed), open (gate open), loaded, or failed."""

    def __init__(self) -> None:
        self.started_at = time.monotonic()
        self.opening: list[str] = ["memory", "kanban", "mcp"]  # what the gate waits for, in order
        self.failure: str | None = None
        self.open_seconds: float | None = None
        self.loaded_seconds: float | None = None
        self._open = asyncio.Event()
        self._stop = asyncio.Event()
        self._loaded = threading.Event()  # also for threads: a test or a benchmark waiting in process
        self._task: asyncio.Task[None] | None = None

    # --- the background task -----------------------------------------------------------------

    def run(self, opener: Callable[[], Awaitable[None]]) -> None:
        """Run ``opener`` (open the services, mark_open, wait for ``until_stopped``, close) as a task."""
        self._task = asyncio.create_task(opener(), name="startup")

    async def stop(self) -> None:
        """Ask the background task to close the services, and wait for it."""
        self._stop.set()
        if self._task is not None:
            await self._task

    async def until_stopped(self) -> None:
        await self._stop.wait()

    def done(self, step: str) -> None:
        if step in self.opening:
            self.opening.remove(step)

    def mark_open(self) -> None:
        self.open_seconds = time.monotonic() - self.started_at
        self.opening.clear()
        self._open.set()

    def mark_loaded(self) -> None:
        self.loaded_seconds = time.monotonic() - self.started_at
        self._loaded.set()

    def mark_failed(self, message: str) -> None:
        self.failure = message
        self._open.set()  # waiters wake up to the failure
        self._loaded.set()

    # --- what others read --------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return self._open.is_set() and self.failure is None

    @property
    def is_loaded(self) -> bool:
        return self._loaded.is_set() and self.failure is None

    @property
    def state(self) -> str:
        if self.failure is not None:
            return "failed"
        return "loaded" if self.is_loaded else "open" if self.is_open else "opening"

    def wait_loaded(self, timeout: float) -> bool:
        """Block a thread until the start ended (loaded or failed); False after ``timeout``."""
        return self._loaded.wait(timeout)

    async def wait_open(self) -> None:
        """Wait for the gate to open (or the start to fail)."""
        await self._open.wait()

    def status(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "seconds_since_start": round(time.monotonic() - self.started_at, 3),
            "open_after_s": _rounded(self.open_seconds),
            "loaded_after_s": _rounded(self.loaded_seconds),
            **({"error": self.failure} if self.failure else {}),
        }


class StartupGate:
    """ASGI middleware: until the services are open, MCP requests wait (bounded) and others get 503 at once."""

    def __init__(self, app: ASGIApp, startup: Startup, wait_s: float = GATE_WAIT_S) -> None:
        self.app = app
        self.startup = startup
        self.wait_s = wait_s
        self.waiting = 0  # requests held right now (a test reads it instead of timing a wait)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self.startup.is_open and scope["path"] not in PROBE_PATHS:
            if self.startup.failure is None and not scope["path"].startswith(WAITING_PREFIXES):
                await _unavailable(send, "the server is still starting; retry shortly", "starting")
                return
            self.waiting += 1
            try:
                async with asyncio.timeout(self.wait_s):
                    await self.startup.wait_open()
            except TimeoutError:
                await _unavailable(send, "the server is still starting; retry shortly", "starting")
                return
            finally:
                self.waiting -= 1
            if self.startup.failure is not None:
                await _unavailable(send, f"the server could not start: {self.startup.failure}", "start_failed")
                return
        await self.app(scope, receive, send)


async def _unavailable(send: Send, detail: str, code: str) -> None:
    body = json.dumps({"detail": detail, "code": code}).encode()
    await send({"type": "http.response.start", "status": 503, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), (b"retry-after", b"1"),
    ]})
    await send({"type": "http.response.body", "body": body})


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
