"""Real servers for transport tests: uvicorn in a thread, or the CLI in a subprocess."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import uvicorn
from fastapi import FastAPI
from starlette.types import ASGIApp

from app.main import create_app
from app.settings import Settings
from app.startup import Startup

T = TypeVar("T")


class _SignallingServer(uvicorn.Server):
    """A uvicorn server that tells a waiting thread when it is listening (no polling)."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = threading.Event()
        self.loop: asyncio.AbstractEventLoop | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self.loop = asyncio.get_running_loop()
        await super().startup(sockets)
        self.ready.set()

    def install_signal_handlers(self) -> None:
        """Signals belong to pytest's main thread."""


@dataclass
class LiveServer:
    url: str
    port: int
    settings: Settings
    server: uvicorn.Server

    @property
    def app(self) -> FastAPI:
        app: FastAPI = self.server.config.app
        return app

    async def on_server_loop(self, call: Coroutine[Any, Any, T]) -> T:
        """Await ``call`` on the server's event loop (its objects belong there), from the test's loop."""
        loop = getattr(self.server, "loop", None)
        assert loop is not None, "not a server of serve_asgi"  # noqa: S101
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(call, loop))

    async def flush_memories(self) -> None:
        """Fold every write the server acknowledged into the LanceDB table now (its journal is flushed about
        once a second): for a test about to read the table itself."""
        await self.on_server_loop(self.app.state.services.memory.writer.flush())


@contextmanager
def serve_asgi(app: ASGIApp, *, startup_timeout: float = 60.0,
               loaded: bool = True) -> Iterator[tuple[int, uvicorn.Server]]:
    """Serve any ASGI app on 127.0.0.1 with a free port in a thread; yields the port and the server.

    ``loaded``: for an app of ``create_app``, which opens its services after it listens, also wait until
    they are open and the model and the vector cache are loaded (``app.state.startup``)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = int(sock.getsockname()[1])
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=3)
    server = _SignallingServer(config)
    failure: list[BaseException] = []

    def serve() -> None:
        try:
            asyncio.run(server.serve(sockets=[sock]))
        except BaseException as exc:  # noqa: BLE001 - surfaced to the test below
            failure.append(exc)
        finally:
            server.ready.set()  # a failed start wakes the waiter too

    thread = threading.Thread(target=serve, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    if not server.ready.wait(startup_timeout) or failure or not server.started:
        server.should_exit = True
        thread.join(10)
        sock.close()
        raise RuntimeError(f"server did not start: {failure[0] if failure else 'timeout'}")
    try:
        startup = getattr(getattr(app, "state", None), "startup", None)
        if loaded and startup is not None:
            _wait_loaded(startup, startup_timeout)
        yield port, server
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


def _wait_loaded(startup: Startup, timeout: float) -> None:
    if not startup.wait_loaded(timeout):
        raise RuntimeError(f"server did not load within {timeout} s: {startup.status()}")
    if startup.failure is not None:
        raise RuntimeError(f"server could not start: {startup.failure}")


@contextmanager
def run_server(settings: Settings, *, startup_timeout: float = 60.0, loaded: bool = True) -> Iterator[LiveServer]:
    """Serve ``create_app(settings)`` on 127.0.0.1 with a free port until the block exits.

    ``loaded``: yield once the services opened and the model and vector cache loaded (the app starts them
    in the background after it listens), else as soon as uvicorn listens.
    """
    with serve_asgi(create_app(settings), startup_timeout=startup_timeout, loaded=loaded) as (port, server):
        yield LiveServer(url=f"http://127.0.0.1:{port}", port=port, settings=settings, server=server)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class ServerProcess:
    url: str
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path


@contextmanager
def spawn_server(
    env: dict[str, str], *, log_path: Path, port: int | None = None, startup_timeout: float = 120.0,
    loaded: bool = True,
) -> Iterator[ServerProcess]:
    """Run ``memory-mcp serve`` as a real process (for signals and kill -9); waits for /healthz, and with
    ``loaded`` for /readyz (the model and the vector cache load after the server answers /healthz)."""
    port = port or free_port()
    full_env = {**os.environ, **env, "MEMORY_MCP_PORT": str(port), "MEMORY_MCP_HOST": "127.0.0.1"}
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve"], env=full_env, stdout=log, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_ready(url, process, startup_timeout)
        if loaded:
            wait_until_loaded(url, process, startup_timeout, full_env.get("MEMORY_MCP_TOKEN"))
        yield ServerProcess(url=url, port=port, process=process, log_path=log_path)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(30)


def wait_until_ready(url: str, process: subprocess.Popen[bytes], timeout: float, path: str = "/healthz",
                     name: str = "server") -> None:
    """Block until ``url + path`` answers 200, or fail if the process exits or the deadline passes."""
    deadline = time.monotonic() + timeout
    # Loopback only: a proxy from the environment must not sit between the test and its own process.
    with httpx.Client(timeout=2.0, trust_env=False) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode} before it was ready")
            try:
                if client.get(f"{url}{path}").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            # Waiting on an external process's socket: a short back-off between probes, bounded by the deadline.
            time.sleep(0.05)
    raise RuntimeError(f"{name} at {url} not ready after {timeout} s")


def wait_until_loaded(url: str, process: subprocess.Popen[bytes], timeout: float, token: str | None = None) -> None:
    """Block until /readyz answers 200 (everything loaded), or fail if the server exits, fails or times out."""
    deadline = time.monotonic() + timeout
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with httpx.Client(timeout=2.0, headers=headers) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"server exited with {process.returncode} before it had loaded")
            try:
                response = client.get(f"{url}/readyz")
            except httpx.TransportError:
                response = None
            if response is not None and response.status_code == 200:
                return
            if response is not None and response.json().get("status") == "failed":
                raise RuntimeError(f"server could not start: {response.text}")
            time.sleep(0.05)  # an external process's state: a short back-off between probes, bounded above
    raise RuntimeError(f"server at {url} not loaded after {timeout} s")
