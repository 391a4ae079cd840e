"""Backpressure: a flood of writes is admitted up to a bound, the rest get 503 "busy, retry" at once; a journal
the flusher cannot fold into the table takes writes up to its bound in rows, then answers 503 journal_full."""

from __future__ import annotations

import asyncio
import os
import time
from datetime import timedelta
from pathlib import Path

import anyio
import httpx
import lancedb
import psutil
import pytest

from app.memory.store import locks
from tests.memory.embeddings.fake_server import fake_embedding_server
from tests.reliability.support import server_env
from tests.support.server import ServerProcess, spawn_server

FLOOD = 120
QUEUE_MAX = 8
JOURNAL_MAX = 40
RSS_GROWTH_BOUND = 100 * 1024 * 1024


async def _remember(http: httpx.AsyncClient, url: str, n: int) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = await http.post(f"{url}/api/lancedb/memories", json={"text": f"flooded write number {n}"})
    return response, time.monotonic() - started


async def _total(http: httpx.AsyncClient, url: str) -> int:
    return int((await http.get(f"{url}/api/lancedb/stats")).json()["total"])


def _assert_busy(response: httpx.Response, elapsed: float, *codes: str) -> None:
    assert response.status_code == 503, (response.status_code, response.text)
    assert response.json()["code"] in (codes or ("store_busy",)) and "retry" in response.json()["detail"]
    assert int(response.headers["retry-after"]) >= 1
    assert elapsed < 5.0  # refused at once, not after waiting for the backlog (generous for a loaded box)


def _rss(server: ServerProcess) -> int:
    return int(psutil.Process(server.process.pid).memory_info().rss)


async def _table_ids(db: Path) -> list[str]:
    """The ids in the LanceDB table itself, as another process reads it."""
    def read() -> list[str]:
        table = lancedb.connect(str(db), read_consistency_interval=timedelta(0)).open_table("memories")
        return [str(i) for i in table.to_arrow().column("id").to_pylist()]

    return await asyncio.to_thread(read)


async def _journal_depth(http: httpx.AsyncClient, url: str) -> int:
    return int((await http.get(f"{url}/readyz")).json()["memory"]["journal"]["depth"])


@pytest.mark.slow
async def test_a_flood_behind_a_stalled_flusher_gets_busy_then_journal_full_and_every_accepted_write_lands(
        tmp_path: Path) -> None:
    env = server_env(tmp_path, MEMORY_MCP_WRITE_QUEUE_MAX=str(QUEUE_MAX), MEMORY_MCP_LOCK_TIMEOUT_S="120",
                     MEMORY_MCP_JOURNAL_MAX_ROWS=str(JOURNAL_MAX))
    held = tmp_path / "lancedb" / locks.LOCK_DIR_NAME
    with spawn_server(env, log_path=tmp_path / "server.log") as server:
        limits = httpx.Limits(max_connections=FLOOD)
        async with httpx.AsyncClient(timeout=60, limits=limits) as http:
            rss_before = _rss(server)
            os.mkdir(held)  # another writer (memory-lancedb-pro's lock) stalls the flusher: nothing reaches the table
            try:
                with anyio.fail_after(60):  # every write is answered while the lock is held
                    flood = await asyncio.gather(*(_remember(http, server.url, n) for n in range(FLOOD)))
                accepted = [r.json()["id"] for r, _ in flood if r.status_code == 200]
                busy = [(r, elapsed) for r, elapsed in flood if r.status_code != 200]
                full = ("journal_full",) if len(accepted) >= JOURNAL_MAX else ()  # only had that many got in
                for response, elapsed in busy:  # too many at once
                    _assert_busy(response, elapsed, "store_busy", *full)
                assert QUEUE_MAX <= len(accepted) < FLOOD
                rss_flooded = _rss(server)
                n = FLOOD
                while len(accepted) < JOURNAL_MAX:  # one at a time, the journal fills to its bound
                    response, elapsed = await _remember(http, server.url, n := n + 1)
                    assert response.status_code == 200, response.text
                    accepted.append(response.json()["id"])
                _assert_busy(*await _remember(http, server.url, n + 1), "journal_full")
                # Writes admitted together are checked against the bound together: it is exceeded by fewer.
                assert JOURNAL_MAX <= len(accepted) < JOURNAL_MAX + QUEUE_MAX
                assert await _journal_depth(http, server.url) == len(accepted)
                assert await _total(http, server.url) == len(accepted)  # read back from the journal
                assert await _table_ids(tmp_path / "lancedb") == []
            finally:
                os.rmdir(held)
            deadline = time.monotonic() + 60
            while len(landed := await _table_ids(tmp_path / "lancedb")) < len(accepted):
                assert time.monotonic() < deadline, f"{len(landed)} of {len(accepted)} writes reached the table"
                await asyncio.sleep(0.05)  # polling the table, as another reader would, with a deadline
            assert sorted(landed) == sorted(accepted)
            after = await http.post(f"{server.url}/api/lancedb/memories", json={"text": "after the flood"})
            assert after.status_code == 200
    print(f"\nBACKPRESSURE stalled flusher: {FLOOD} sent at once, {len(busy)} busy, journal full at"  # noqa: T201
          f" {len(accepted)}; RSS {rss_before / 2**20:.0f} -> {rss_flooded / 2**20:.0f} MiB")
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
