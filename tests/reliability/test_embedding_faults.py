"""A misbehaving embedding provider: remember fails within its deadline and writes nothing, recall answers
from keywords within its budget, and an open breaker is closed by a background probe, never a request."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from datetime import timedelta
from typing import Any

import anyio
import httpx
import lancedb
import numpy as np
import pytest
from mcp import Client

from app.memory.embeddings.remote import PROBE_TEXT
from tests.conftest import SettingsFactory
from tests.mcp.clients import streamable_session
from tests.memory.embeddings.fake_server import FakeEmbeddingServer, fake_embedding_server
from tests.support.server import LiveServer, run_server

DIMENSION = 8
BOUND_S = 6.0  # (1 + 1 retry) x 1 s read timeout + back-off, with room for a loaded box
FAULTS = ["hang", "status:500", "status:429", "wrong_dim", "nan"]
SEED = "The staging database is rebuilt every night from the kiwi snapshot"
DEADLINE_S = 3.0  # remember's deadline in the hanging-provider tests (production: 10 s)
RECALL_BOUND_S = 3.0  # the recall budget is 1 s; the rest is room for a loaded 2-core box
AT_ONCE_S = 1.0  # "at once": no provider call is waited for (typically a few ms)

ServerFactory = Callable[..., AbstractContextManager[LiveServer]]


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeEmbeddingServer]:
    with fake_embedding_server(dimension=DIMENSION) as server:
        yield server


@pytest.fixture
def remote_server_with(make_settings: SettingsFactory, fake: FakeEmbeddingServer) -> ServerFactory:
    """A live server embedding through the fake provider, with the given settings on top."""

    def start(**overrides: Any) -> AbstractContextManager[LiveServer]:
        fake.set("ok")
        values: dict[str, Any] = {
            "embedding_provider": "openai", "embedding_base_url": fake.url, "embedding_model": "fake-model",
            "embedding_api_key": "sk-test-key", "embedding_dimensions": DIMENSION, "embedding_timeout_s": 1.0,
            "embedding_max_retries": 1, "embedding_breaker_cooldown_s": 0.5,
        }
        return run_server(make_settings(**(values | overrides)))

    return start


@pytest.fixture
def remote_server(remote_server_with: ServerFactory) -> Iterator[LiveServer]:
    with remote_server_with() as server:
        yield server


@pytest.fixture
def hanging_server(remote_server_with: ServerFactory) -> Iterator[LiveServer]:
    """Production timeouts (10 s read, 2 retries) under a short deadline: only the deadline can end a call."""
    with remote_server_with(embedding_timeout_s=10.0, embedding_max_retries=2,
                            embedding_deadline_s=DEADLINE_S) as server:
        yield server


async def _total(http: httpx.AsyncClient, url: str) -> int:
    response = await http.get(f"{url}/api/lancedb/stats")
    assert response.status_code == 200, response.text
    return int(response.json()["total"])


async def _seed(http: httpx.AsyncClient, url: str) -> str:
    seeded = await http.post(f"{url}/api/lancedb/memories", json={"text": SEED})
    assert seeded.status_code == 200, seeded.text
    return str(seeded.json()["id"])


async def _breaker(http: httpx.AsyncClient, url: str) -> str:
    """What the server reports of its breaker."""
    return str((await http.get(f"{url}/readyz")).json()["memory"]["embedder"]["breaker"])


async def _until_the_probe_closes_the_breaker(server: LiveServer) -> None:
    """Wait on the server's own loop for its background probe to close the breaker (at once if closed)."""
    embedder = server.app.state.services.memory.embedder
    await server.on_server_loop(embedder.until_available())


async def _refused_without_a_write(http: httpx.AsyncClient, mcp: Client, url: str, fault: str) -> float:
    before = await _total(http, url)
    started = time.monotonic()
    response = await http.post(f"{url}/api/lancedb/memories", json={"text": f"written while the embedder is {fault}"})
    elapsed = time.monotonic() - started
    assert response.status_code == 503, (fault, response.status_code, response.text)
    assert response.json()["code"] == "embedding_unavailable" and response.json()["detail"]
    assert int(response.headers["retry-after"]) >= 1
    assert "sk-test-key" not in response.text
    tool = await mcp.call_tool("remember", {"content": f"tool write while the embedder is {fault}"})
    assert tool.is_error is True and tool.content[0].text.startswith("embedding_unavailable: ")  # type: ignore[union-attr]
    assert await _total(http, url) == before
    return elapsed


async def _recalled_by_keywords(http: httpx.AsyncClient, mcp: Client, url: str, seed_id: str) -> tuple[float, float]:
    """One REST and one MCP recall; both must fall back to keywords and find the seed. Returns their times."""
    started = time.monotonic()
    found = await http.get(f"{url}/api/lancedb/vector-search", params={"q": "kiwi snapshot", "limit": 5})
    rest_s = time.monotonic() - started
    assert found.status_code == 200 and found.headers["x-search-mode"] == "keyword_fallback"
    assert [hit["id"] for hit in found.json()] == [seed_id]
    started = time.monotonic()
    recalled = await mcp.call_tool("recall", {"query": "kiwi snapshot"})
    mcp_s = time.monotonic() - started
    assert recalled.is_error is False
    assert recalled.structured_content["mode"] == "keyword_fallback"  # type: ignore[index]
    assert [m["memory_id"] for m in recalled.structured_content["memories"]] == [seed_id]  # type: ignore[index]
    return rest_s, mcp_s


async def _assert_every_stored_vector_is_valid(server: LiveServer, rows_expected: int) -> None:
    """The invariant scan after the faults: no NaN/inf, zero or wrongly sized vector was ever written (into the
    table, once every acknowledged write is flushed into it)."""
    await server.flush_memories()
    db = lancedb.connect(str(server.settings.db_path), read_consistency_interval=timedelta(0))
    rows = db.open_table(server.settings.table).to_arrow().select(["vector"]).to_pylist()
    assert len(rows) == rows_expected
    for row in rows:
        vector = np.asarray(row["vector"], dtype=np.float32)
        assert vector.shape == (DIMENSION,) and np.all(np.isfinite(vector))
        assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-3


@pytest.mark.slow
async def test_every_provider_fault_is_a_fast_503_that_writes_nothing_and_recovers(
        remote_server: LiveServer, fake: FakeEmbeddingServer) -> None:
    url = remote_server.url
    latencies: dict[str, float] = {}
    async with httpx.AsyncClient(timeout=30) as http, streamable_session(url) as mcp:
        seed_id = await _seed(http, url)
        for fault in FAULTS:
            fake.set(fault)
            latencies[fault] = await _refused_without_a_write(http, mcp, url, fault)
            assert latencies[fault] < BOUND_S, (fault, latencies[fault])
            assert (await http.get(f"{url}/healthz")).status_code == 200
            await _recalled_by_keywords(http, mcp, url, seed_id)
            fake.set("ok")
            with anyio.fail_after(15):
                await _until_the_probe_closes_the_breaker(remote_server)  # if the faults opened it
            assert await _breaker(http, url) == "closed"
            before = await _total(http, url)
            recovered = await http.post(f"{url}/api/lancedb/memories", json={"text": f"after the {fault} fault"})
            assert recovered.status_code == 200, (fault, recovered.text)
            assert await _total(http, url) == before + 1
            vector = await http.get(f"{url}/api/lancedb/vector-search", params={"q": "kiwi snapshot"})
            assert vector.headers["x-search-mode"] == "vector"
    await _assert_every_stored_vector_is_valid(remote_server, 1 + len(FAULTS))  # the seed and one write per recovery
    print("\nFAULTS remember 503 after: " + ", ".join(f"{f}={s:.2f}s" for f, s in latencies.items()))  # noqa: T201


@pytest.mark.slow
async def test_a_hanging_provider_costs_recall_its_budget_and_remember_its_deadline(
        hanging_server: LiveServer, fake: FakeEmbeddingServer) -> None:
    url = hanging_server.url
    async with httpx.AsyncClient(timeout=30) as http, streamable_session(url) as mcp:
        seed_id = await _seed(http, url)
        fake.set("hang")  # connections are accepted, requests read, and never answered
        recall_times = [t for _ in range(2) for t in await _recalled_by_keywords(http, mcp, url, seed_id)]
        assert max(recall_times) < RECALL_BOUND_S, recall_times
        remember_s = await _refused_without_a_write(http, mcp, url, "hanging")
        assert remember_s < DEADLINE_S + 1.5, remember_s
        assert await _total(http, url) == 1
    print(f"\nHANG recall (REST, MCP) {', '.join(f'{t:.2f}' for t in recall_times)} s; "  # noqa: T201
          f"remember 503 after {remember_s:.2f} s (deadline {DEADLINE_S:g} s)")


@pytest.mark.slow
async def test_an_open_breaker_answers_at_once_and_a_background_probe_closes_it(
        hanging_server: LiveServer, fake: FakeEmbeddingServer) -> None:
    url = hanging_server.url
    async with httpx.AsyncClient(timeout=30) as http, streamable_session(url) as mcp:
        seed_id = await _seed(http, url)
        warm = await mcp.call_tool("recall", {"query": "kiwi snapshot"})  # first-call costs are not timed below
        assert warm.structured_content["mode"] == "vector"  # type: ignore[index]
        fake.set("hang")

        async def remember(text: str) -> None:
            response = await http.post(f"{url}/api/lancedb/memories", json={"text": text})
            assert response.status_code == 503, response.text

        async with anyio.create_task_group() as group:  # five failed calls open the breaker
            for n in range(5):
                group.start_soon(remember, f"opener {n}")
        assert await _breaker(http, url) == "open"
        user_requests_sent = fake.hits
        # Several cooldowns pass (0.5 s each) while hanging probes run: no request waits for one.
        times: list[float] = []
        for _ in range(4):
            times += await _recalled_by_keywords(http, mcp, url, seed_id)
            times.append(await _refused_without_a_write(http, mcp, url, "behind an open breaker"))
        worst = max(times)
        assert worst < AT_ONCE_S, times
        later = fake.state.requests[user_requests_sent:]
        assert later and all(r.body["input"] == [PROBE_TEXT] for r in later)  # probes only, no user's text
        fake.set("ok")
        with anyio.fail_after(DEADLINE_S + 10):  # a hanging probe ends at its deadline, the next one answers
            await _until_the_probe_closes_the_breaker(hanging_server)  # no request to the API meanwhile
        assert await _breaker(http, url) == "closed"
        assert fake.state.requests[-1].body["input"] == [PROBE_TEXT]  # the probe closed it
        started = time.monotonic()
        stored = await http.post(f"{url}/api/lancedb/memories", json={"text": "written after the recovery"})
        assert stored.status_code == 200, stored.text
        vector = await http.get(f"{url}/api/lancedb/vector-search", params={"q": "kiwi snapshot"})
        assert vector.headers["x-search-mode"] == "vector" and time.monotonic() - started < AT_ONCE_S * 2
    await _assert_every_stored_vector_is_valid(hanging_server, 2)
    print(f"\nOPEN BREAKER recall REST, MCP, remember (ms): {', '.join(f'{t * 1000:.0f}' for t in times)}; "  # noqa: T201
          f"{len(later)} background probes")
