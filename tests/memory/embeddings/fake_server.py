"""A real HTTP embeddings server on 127.0.0.1 that misbehaves on command.

It speaks the OpenAI/Jina ``POST /v1/embeddings`` shape, records every request (path, headers,
JSON body) and answers according to a plan: a queue of modes consumed one per request, then the
default mode. Vectors are deterministic per input text, so tests can check ordering.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import socket
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

# ok | hang | drip | slow | status:<code>[:<retry-after>] | wrong_dim | nan | inf | zero | wrong_count
# | not_json | no_data | echo_auth_401
Mode = str


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class FakeState:
    dimension: int
    default: Mode = "ok"
    plan: deque[Mode] = field(default_factory=deque)
    requests: list[Recorded] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    arrived: threading.Condition = field(init=False)

    def __post_init__(self) -> None:
        self.arrived = threading.Condition(self.lock)  # notified under ``lock`` when a request is recorded

    def next_mode(self) -> Mode:
        with self.lock:
            return self.plan.popleft() if self.plan else self.default


def vector_for(text: str, dimension: int) -> list[float]:
    """The deterministic unit vector the fake returns for ``text``."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    vector = np.random.default_rng(seed).standard_normal(dimension)
    return (vector / np.linalg.norm(vector)).tolist()


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        """Silence the per-request stderr line."""

    def do_POST(self) -> None:
        state = self.server.state
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        with state.lock:
            state.requests.append(Recorded(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            state.arrived.notify_all()
            state.in_flight += 1
            state.max_in_flight = max(state.max_in_flight, state.in_flight)
        try:
            self._answer(state.next_mode(), body, state)
        finally:
            with state.lock:
                state.in_flight -= 1

    def _answer(self, mode: Mode, body: Any, state: FakeState) -> None:
        if mode == "hang":
            state.release.wait(30)
            return
        if mode == "drip":
            self._drip(state)
            return
        if mode == "slow":
            state.release.wait(0.2)
            mode = "ok"
        if mode.startswith("status:"):
            _, code, *retry = mode.split(":")
            self._send(int(code), {"detail": f"fake status {code}"}, {"Retry-After": retry[0]} if retry else {})
            return
        if mode == "echo_auth_401":
            self._send(401, {"detail": f"invalid key {self.headers.get('Authorization')}"})
            return
        if mode == "not_json":
            self._send_raw(200, b"<html>gateway error</html>", "text/html")
            return
        self._send(200, self._embeddings(mode, body, state.dimension))

    def _embeddings(self, mode: Mode, body: Any, dimension: int) -> dict[str, Any]:
        inputs = body.get("input") if isinstance(body, dict) else []
        texts = [inputs] if isinstance(inputs, str) else list(inputs or [])  # OpenAI accepts a bare string too
        size = int(body.get("dimensions") or dimension) if isinstance(body, dict) else dimension
        if mode == "no_data":
            return {"object": "list"}
        rows = [vector_for(text, size) for text in texts]
        if mode == "wrong_dim":
            rows = [row[:-1] for row in rows]
        elif mode == "nan":
            rows[0][0] = float("nan")
        elif mode == "inf":
            rows[0][0] = float("inf")
        elif mode == "zero":
            rows[0] = [0.0] * size
        elif mode == "wrong_count":
            rows = rows[:-1] or []
        # Reverse the order and rely on "index", as real servers may.
        data = [{"object": "embedding", "index": i, "embedding": row} for i, row in enumerate(rows)][::-1]
        return {"object": "list", "data": data, "model": body.get("model") if isinstance(body, dict) else None}

    def _drip(self, state: FakeState) -> None:
        """Headers at once, then one byte every 0.2 s: read timeouts never fire, deadlines must."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "100000")
        self.end_headers()
        while not state.release.wait(0.2):
            try:
                self.wfile.write(b" ")
                self.wfile.flush()
            except OSError:
                return

    def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        self._send_raw(status, json.dumps(payload).encode(), "application/json", headers)

    def _send_raw(self, status: int, data: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        with contextlib.suppress(OSError):  # the client gave up (deadline); nothing to do
            self.wfile.write(data)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    state: FakeState


@dataclass
class FakeEmbeddingServer:
    url: str
    state: FakeState

    @property
    def hits(self) -> int:
        return len(self.state.requests)

    def wait_for_hits(self, count: int, timeout: float = 10.0) -> bool:
        """Block until ``count`` requests have arrived in all (False after ``timeout``)."""
        with self.state.arrived:
            return self.state.arrived.wait_for(lambda: len(self.state.requests) >= count, timeout)

    def set(self, default: Mode = "ok", *plan: Mode) -> None:
        with self.state.lock:
            self.state.default = default
            self.state.plan = deque(plan)


@contextmanager
def fake_embedding_server(dimension: int = 8) -> Iterator[FakeEmbeddingServer]:
    """Serve on 127.0.0.1:<free port> in a thread; release hanging handlers on exit."""
    server = _Server(("127.0.0.1", 0), _Handler)
    server.state = FakeState(dimension=dimension)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield FakeEmbeddingServer(f"http://127.0.0.1:{server.server_address[1]}/v1", server.state)
    finally:
        server.state.release.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


def refused_url() -> str:
    """A loopback URL where nothing listens (the port was just free)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


@contextmanager
def silent_server() -> Iterator[str]:
    """A loopback server that accepts connections and never reads or answers; yields its ``/v1`` URL."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept_forever() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:  # shut down below
                return
            held.append(connection)

    thread = threading.Thread(target=accept_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    finally:
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        listener.close()
        thread.join(5)
        for connection in held:
            connection.close()
