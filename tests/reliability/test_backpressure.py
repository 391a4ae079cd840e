"""Backpressure: a flood of writes is admitted up to a bound, the rest get 503 "busy, retry" at once."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable
from pathlib import Path

import anyio
import httpx
import psutil
import pytest

from app.memory.store import locks
from tests.memory.embeddings.fake_server import fake_embedding_server
from tests.reliability.support import server_env
from tests.support.server import ServerProcess, spawn_server

FLOOD = 120
QUEUE_MAX = 8
RSS_GROWTH_BOUND = 100 * 1024 * 1024


async def _remember(http: httpx.AsyncClient, url: str, n: int) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = await http.post(f"{url}/api/lancedb/memories", json={"text": f"flooded write number {n}"})
    return response, time.monotonic() - started


async def _total(http: httpx.AsyncClient, url: str) -> int:
    return int((await http.get(f"{url}/api/lancedb/stats")).json()["total"])


def _assert_busy(response: httpx.Response, elapsed: float) -> None:
    assert response.status_code == 503, (response.status_code, response.text)
    assert response.json()["code"] == "store_busy" and "retry" in response.json()["detail"]
    assert int(response.headers["retry-after"]) >= 1
    assert elapsed < 5.0  # refused at once, not after waiting for the backlog (generous for a loaded box)


class _Countdown:
    """Counts finished requests and fires once ``target`` of them have an answer."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.finished = 0
        self.reached = anyio.Event()

    async def track(self, call: Awaitable[tuple[httpx.Response, float]]) -> tuple[httpx.Response, float]:
        result = await call
        self.finished += 1
        if self.finished >= self.target:
            self.reached.set()
        return result


def _rss(server: ServerProcess) -> int:
    return int(psutil.Process(server.process.pid).memory_info().rss)


@pytest.mark.slow
async def test_a_flood_behind_a_stalled_writer_gets_busy_and_every_accepted_write_lands(tmp_path: Path) -> None:
    env = server_env(tmp_path, MEMORY_MCP_WRITE_QUEUE_MAX=str(QUEUE_MAX), MEMORY_MCP_LOCK_TIMEOUT_S="120")
    held = tmp_path / "lancedb" / locks.LOCK_DIR_NAME
    with spawn_server(env, log_path=tmp_path / "server.log") as server:
        limits = httpx.Limits(max_connections=FLOOD)
        async with httpx.AsyncClient(timeout=60, limits=limits) as http:
            rss_before = _rss(server)
            os.mkdir(held)  # another writer (memory-lancedb-pro's lock) stalls our writer's commits
            refusals = _Countdown(FLOOD - QUEUE_MAX)  # all but the admitted ones answer while the lock is held
            tasks = [asyncio.create_task(refusals.track(_remember(http, server.url, n))) for n in range(FLOOD)]
            with anyio.fail_after(60):
                await refusals.reached.wait()
            for task in [t for t in tasks if t.done()]:
                _assert_busy(*task.result())
            rss_flooded = _rss(server)
            os.rmdir(held)
            with anyio.fail_after(60):
                outcomes = await asyncio.gather(*tasks)
            accepted = [r.json()["id"] for r, _ in outcomes if r.status_code == 200]
            assert len(accepted) == QUEUE_MAX
            assert await _total(http, server.url) == QUEUE_MAX
            after = await http.post(f"{server.url}/api/lancedb/memories", json={"text": "after the flood"})
            assert after.status_code == 200
    print(f"\nBACKPRESSURE stalled writer: {FLOOD} sent, {len(accepted)} accepted, {FLOOD - len(accepted)} busy;"  # noqa: T201
          f" RSS {rss_before / 2**20:.0f} -> {rss_flooded / 2**20:.0f} MiB")
    assert rss_flooded - rss_before < RSS_GROWTH_BOUND


@pytest.mark.slow
async def test_a_flood_on_a_slow_embedder_is_bounded_and_never_mistaken_for_an_outage(tmp_path: Path) -> None:
    with fake_embedding_server(dimension=8) as fake:
        fake.set("slow")  # 0.2 s per call, healthy
        env = server_env(tmp_path, MEMORY_MCP_WRITE_QUEUE_MAX=str(QUEUE_MAX), MEMORY_MCP_EMBEDDING_PROVIDER="openai",
                         MEMORY_MCP_EMBEDDING_BASE_URL=fake.url, MEMORY_MCP_EMBEDDING_MODEL="fake-model",
                         MEMORY_MCP_EMBEDDING_API_KEY="sk-test", MEMORY_MCP_EMBEDDING_DIMENSIONS="8")
        with spawn_server(env, log_path=tmp_path / "server.log") as server:
            async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=FLOOD)) as http:
                rss_before = _rss(server)
                with anyio.fail_after(60):
                    outcomes = await asyncio.gather(*(_remember(http, server.url, n) for n in range(FLOOD)))
                rss_after = _rss(server)
                accepted = [r.json()["id"] for r, _ in outcomes if r.status_code == 200]
                for response, elapsed in outcomes:
                    if response.status_code != 200:
                        _assert_busy(response, elapsed)
                assert 1 <= len(accepted) < FLOOD
                assert await _total(http, server.url) == len(accepted)
                fake.set("ok")
                after = await http.post(f"{server.url}/api/lancedb/memories", json={"text": "after the flood"})
                assert after.status_code == 200, after.text  # the breaker did not open on a healthy provider
    print(f"\nBACKPRESSURE slow embedder: {FLOOD} sent, {len(accepted)} accepted, {FLOOD - len(accepted)} busy;"  # noqa: T201
          f" provider saw at most {fake.state.max_in_flight} concurrent calls;"
          f" RSS {rss_before / 2**20:.0f} -> {rss_after / 2**20:.0f} MiB")
    assert fake.state.max_in_flight <= 4
    assert rss_after - rss_before < RSS_GROWTH_BOUND
