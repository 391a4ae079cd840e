"""A real server process under load: ``serve`` starts ``python -m app.cli serve`` and waits until it is ready,
``RssSampler`` watches its memory, and the clients below load it (REST and MCP recall, remember) with the
lean keep-alive ``RawConnection``."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import psutil
from mcp import Client

from bench.support.common import latency_summary_ms

REPO = Path(__file__).resolve().parents[2]
K = 10


@dataclass
class ServerProcess:
    url: str
    pid: int
    log_path: Path

    def rss_parts_mb(self) -> tuple[float, float]:
        """Resident memory of the server process and of its children (the local model runs in one)."""
        server = psutil.Process(self.pid)
        children = sum(p.memory_info().rss for p in server.children(recursive=True))
        return server.memory_info().rss / 2**20, children / 2**20

    def rss_mb(self) -> float:
        return sum(self.rss_parts_mb())

    def children_rss_mb(self) -> float:
        return self.rss_parts_mb()[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serve(
    db_path: Path, log_path: Path, *, module: str = "app.cli", provider: str = "local", timeout_s: float = 180.0,
    extra_env: dict[str, str] | None = None, wait_ready: bool = True, stop_timeout_s: float = 20.0,
) -> Iterator[ServerProcess]:
    """Start ``python -m <module> serve`` on a free loopback port with a clean MEMORY_MCP_* environment;
    yields once ``/readyz`` is 200 (or at once, ``wait_ready=False``: the caller watches the start); at the
    end SIGTERM, and SIGKILL after ``stop_timeout_s``."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_MCP_")}
    env.update({
        "MEMORY_MCP_HOST": "127.0.0.1", "MEMORY_MCP_PORT": str(port), "MEMORY_MCP_DB_PATH": str(db_path),
        "MEMORY_MCP_KANBAN_DB": str(db_path.parent / "kanban.sqlite3"), "MEMORY_MCP_EMBEDDING_PROVIDER": provider,
        "MEMORY_MCP_LOG_LEVEL": "WARNING", "PYTHONPATH": str(REPO), **(extra_env or {}),
    })
    url = f"http://127.0.0.1:{port}"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", module, "serve"], env=env, cwd=db_path.parent, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        if wait_ready:
            _wait_ready(url, process, timeout_s, log_path)
        yield ServerProcess(url, process.pid, log_path)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(stop_timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


def _wait_ready(url: str, process: subprocess.Popen[bytes], timeout_s: float, log_path: Path) -> None:
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=2.0, trust_env=False) as client:  # loopback: no proxy
        while time.monotonic() < deadline:
            if process.poll() is not None:
                tail = log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"server exited with {process.returncode}:\n{tail}")
            try:
                if client.get(f"{url}/readyz").status_code == 200:  # not /healthz: REST answers 503 until ready
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)  # polling another process's socket, bounded by the deadline
    raise RuntimeError(f"server at {url} not ready after {timeout_s} s")


class RssSampler:
    """Samples the server's resident memory every 100 ms: ``peak_mb`` counts its children (the local
    model's process), ``main_peak_mb`` the server process alone; ``phase(name)`` starts a new bucket
    of ``phase_peaks_mb`` so a peak can be traced to the load that made it."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.peak_mb = 0.0
        self.main_peak_mb = 0.0
        self.phase_peaks_mb: dict[str, float] = {}
        self._phase = "start"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _sample(self) -> None:
        main_mb, children_mb = self.server.rss_parts_mb()
        total_mb = main_mb + children_mb
        self.main_peak_mb = max(self.main_peak_mb, main_mb)
        self.peak_mb = max(self.peak_mb, total_mb)
        self.phase_peaks_mb[self._phase] = round(max(self.phase_peaks_mb.get(self._phase, 0.0), total_mb), 1)

    def phase(self, name: str) -> None:
        self._phase = name

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            try:
                self._sample()
            except psutil.Error:
                return

    def __enter__(self) -> RssSampler:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


# --- the load ----------------------------------------------------------------------------------------
class RawConnection:
    """A minimal keep-alive HTTP/1.1 JSON client on asyncio streams, for load generation only; ``request``
    calls must not overlap.

    Why not httpx: the load generator runs on the same two cores as the server. Measured at 1k rows
    with 32 remember clients, httpx spent 6.7 ms of CPU per request (0.63 cores at 94 writes/s) and the
    server reached 94/s; this client spends about 0.1 ms (0.02 cores) and the server reached 197/s. It
    speaks only what the benchmark sends: requests with a Content-Length body, responses with a
    Content-Length (FastAPI's JSON responses), no chunking, no TLS.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str) -> None:
        self.reader, self.writer, self.host = reader, writer, host

    @classmethod
    async def open(cls, url: str) -> RawConnection:
        host_port = url.removeprefix("http://").rstrip("/")
        host, _, port = host_port.partition(":")
        reader, writer = await asyncio.open_connection(host, int(port or 80))
        return cls(reader, writer, host_port)

    async def request(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        data = b"" if body is None else json.dumps(body).encode()
        head = (f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(data)}\r\n\r\n")
        self.writer.write(head.encode() + data)
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionError("the server closed the connection")
        status = int(status_line.split()[1])
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return status, await self.reader.readexactly(length) if length else b""

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


async def rest_recall(
    url: str, queries: Sequence[str], scope: str | None = None
) -> tuple[dict[str, float], list[list[str]]]:
    """Sequential GET /api/lancedb/vector-search calls on one keep-alive connection."""
    latencies, results = [], []
    async with httpx.AsyncClient(base_url=url, timeout=60.0) as client:
        for i, query in enumerate(queries):
            params: dict[str, Any] = {"q": query, "limit": K, **({"scope": scope} if scope else {})}
            start = time.perf_counter()
            response = await client.get("/api/lancedb/vector-search", params=params)
            elapsed = time.perf_counter() - start
            response.raise_for_status()
            if i >= 2:  # the first calls warm the connection and the server's caches
                latencies.append(elapsed)
            results.append([hit["id"] for hit in response.json()])
    return latency_summary_ms(latencies), results


async def mcp_recall(url: str, queries: Sequence[str]) -> dict[str, float]:
    """Sequential ``recall`` tool calls over Streamable HTTP with the official MCP client, one session."""
    latencies = []
    async with Client(f"{url}/mcp") as client:
        for i, query in enumerate(queries):
            start = time.perf_counter()
            result = await client.call_tool("recall", {"query": query, "top_k": K})
            elapsed = time.perf_counter() - start
            if result.is_error:
                raise RuntimeError(f"recall tool failed: {result.content}")
            if i >= 2:
                latencies.append(elapsed)
    return latency_summary_ms(latencies)


async def concurrent_recall(url: str, queries: Sequence[str], clients: int, per_client: int) -> dict[str, float]:
    """``clients`` connections, each issuing ``per_client`` sequential REST recalls; latency over all
    calls. Sent by ``RawConnection`` like the remember load: httpx's CPU per request would take the
    server's cores and grow with the client count, which is the very thing measured here."""
    latencies: list[float] = []
    errors = 0
    connections = [await RawConnection.open(url) for _ in range(clients)]

    async def one(c: int, connection: RawConnection) -> None:
        nonlocal errors
        for r in range(per_client):
            query = queries[(c * per_client + r) % len(queries)]
            path = f"/api/lancedb/vector-search?{urlencode({'q': query, 'limit': K})}"
            start = time.perf_counter()
            status, _ = await connection.request("GET", path)
            latencies.append(time.perf_counter() - start)
            errors += status != 200

    start = time.perf_counter()
    try:
        await asyncio.gather(*(one(c, conn) for c, conn in enumerate(connections)))
    finally:
        for connection in connections:
            await connection.close()
    wall = time.perf_counter() - start
    if errors:
        raise RuntimeError(f"{errors} of {clients * per_client} concurrent recalls failed")
    return {**latency_summary_ms(latencies), "clients": clients, "wall_s": round(wall, 3)}


@dataclass(frozen=True)
class Call:
    done_s: float  # when the reply arrived, seconds after the load started
    latency_s: float
    status: int


async def remember_calls(url: str, texts: Sequence[str], clients: int, deadline_s: float) -> tuple[list[Call], float]:
    """POST /api/lancedb/memories from ``clients`` connections until the texts run out or the deadline
    passes; every call, and the wall time. The load comes from ``RawConnection`` (about 0.1 ms of CPU a
    request), not httpx (6.7 ms), so the generator does not take the server's cores."""
    calls: list[Call] = []
    queue = list(reversed(texts))
    connections = [await RawConnection.open(url) for _ in range(clients)]
    start = time.perf_counter()
    stop_at = start + deadline_s

    async def one(connection: RawConnection) -> None:
        while queue and time.perf_counter() < stop_at:
            text = queue.pop()
            sent = time.perf_counter()
            status, _ = await connection.request("POST", "/api/lancedb/memories", {"text": text, "category": "bench"})
            now = time.perf_counter()
            calls.append(Call(now - start, now - sent, status))

    try:
        await asyncio.gather(*(one(c) for c in connections))
    finally:
        wall = time.perf_counter() - start
        for connection in connections:
            await connection.close()
    return calls, wall


async def remember_throughput(url: str, texts: Sequence[str], clients: int, deadline_s: float) -> dict[str, Any]:
    """``remember_calls`` summarised: writes per second, errors, latency."""
    calls, wall = await remember_calls(url, texts, clients, deadline_s)
    return {
        "clients": clients, "writes": len(calls), "errors": sum(not 200 <= c.status < 300 for c in calls),
        "wall_s": round(wall, 3), "per_s": round(len(calls) / wall, 1) if wall else 0.0,
        "latency": latency_summary_ms([c.latency_s for c in calls]),
    }


Timed = list[tuple[float, float]]  # (wall clock when answered, latency in seconds)


async def recaller(url: str, queries: list[str], stop_at: float, latencies: Timed, errors: list[Any]) -> None:
    """REST recalls one after another on one connection until ``stop_at`` (``time.monotonic``)."""
    connection = await RawConnection.open(url)
    try:
        i = 0
        while time.monotonic() < stop_at:
            path = f"/api/lancedb/vector-search?{urlencode({'q': queries[i % len(queries)], 'limit': K})}"
            started = time.perf_counter()
            status, body = await connection.request("GET", path)
            latencies.append((time.time(), time.perf_counter() - started))
            count_error(errors, status, body)
            i += 1
    finally:
        await connection.close()


async def rememberer(url: str, texts: list[str], stop_at: float, latencies: Timed, errors: list[Any]) -> None:
    """REST remembers of ``texts`` (popped: clients share the list) until it is empty or ``stop_at`` passes."""
    connection = await RawConnection.open(url)
    try:
        while texts and time.monotonic() < stop_at:
            started = time.perf_counter()
            body = {"text": texts.pop(), "category": "bench"}
            status, answer = await connection.request("POST", "/api/lancedb/memories", body)
            latencies.append((time.time(), time.perf_counter() - started))
            count_error(errors, status, answer)
    finally:
        await connection.close()


def count_error(errors: list[Any], status: int, body: bytes) -> None:
    """``errors``: [count, the first error's status and body]."""
    if not 200 <= status < 300:
        errors[0] += 1
        if len(errors) == 1:
            errors.append(f"{status} {body[:300].decode(errors='replace')}")
