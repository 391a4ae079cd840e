"""Helpers for the edge tests: raw HTTP over a socket, a probe app around EdgeGuard, uvicorn in a thread."""

from __future__ import annotations

import socket
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from fastapi import FastAPI, Request
from starlette.middleware import Middleware
from starlette.types import ASGIApp, Receive, Scope, Send

from app.edge.guard import EdgeGuard
from app.settings import Settings
from tests.support.server import serve_asgi


@dataclass
class RawResponse:
    status: int
    headers: dict[str, list[str]]
    body: bytes

    def header(self, name: str) -> str | None:
        values = self.headers.get(name.lower())
        return values[0] if values else None


def _parse_response(data: bytes) -> RawResponse:
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers: dict[str, list[str]] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers.setdefault(name.strip().lower(), []).append(value.strip())
    return RawResponse(int(lines[0].split()[1]), headers, body)


def raw_request(port: int, head: bytes, body_chunks: Iterable[bytes] = (), timeout: float = 10.0) -> RawResponse:
    """Send ``head`` (request line + headers, without the blank line) and ``body_chunks``; read to close.

    Sending stops quietly if the server answers and closes early; the response is what counts.
    """
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(head + b"\r\nConnection: close\r\n\r\n")
        try:
            for chunk in body_chunks:
                sock.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
        received = bytearray()
        while data := sock.recv(65536):
            received += data
    return _parse_response(bytes(received))


def chunked(piece: bytes, total: int) -> Iterator[bytes]:
    """``total`` bytes as HTTP/1.1 chunks of ``piece`` (the same object reused: no client-side growth)."""
    frame = b"%x\r\n" % len(piece) + piece + b"\r\n"
    for _ in range(total // len(piece)):
        yield frame
    yield b"0\r\n\r\n"


@dataclass
class Probe:
    """Counts every request that got past the guard, and what the guard told it."""

    calls: int = 0
    seen: list[dict[str, object]] = field(default_factory=list)


class _CountingMiddleware:
    def __init__(self, app: ASGIApp, probe: Probe) -> None:
        self.app = app
        self.probe = probe

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self.probe.calls += 1
        await self.app(scope, receive, send)


def count_requests(app: FastAPI, probe: Probe) -> None:
    """Install a counter innermost, behind EdgeGuard (add_middleware would put it outside)."""
    app.user_middleware.append(Middleware(_CountingMiddleware, probe=probe))


def probe_app(settings: Settings, probe: Probe) -> FastAPI:
    """A small FastAPI app behind EdgeGuard whose routes report what the guard passed in."""
    app = FastAPI()

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.api_route("/probe", methods=["GET", "POST"])
    async def state(request: Request) -> dict[str, object]:
        seen = {name: getattr(request.state, name, None) for name in ("agent", "request_id", "token_id")}
        probe.seen.append(seen)
        return seen

    @app.post("/upload")
    async def upload(request: Request) -> dict[str, int]:
        size = 0
        try:
            async for chunk in request.stream():
                size += len(chunk)
        finally:
            probe.seen.append({"upload_bytes": size})  # what the app got before any cut
        return {"size": size}

    app.add_middleware(EdgeGuard, settings=settings)
    count_requests(app, probe)
    return app


@contextmanager
def serve_app(app: ASGIApp) -> Iterator[int]:
    """Serve any ASGI app on 127.0.0.1 with a free port in a thread; yields the port."""
    with serve_asgi(app, startup_timeout=30) as (port, _server):
        yield port
