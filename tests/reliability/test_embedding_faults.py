"""A misbehaving embedding provider: remember fails fast and writes nothing, recall degrades to keywords."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta

import httpx
import lancedb
import numpy as np
import pytest
from mcp import Client

from tests.conftest import SettingsFactory
from tests.mcp.clients import streamable_session
from tests.memory.embeddings.fake_server import FakeEmbeddingServer, fake_embedding_server
from tests.support.server import LiveServer, run_server

DIMENSION = 8
TIMEOUT_S = 1.0
BOUND_S = 6.0  # (1 + 1 retry) x 1 s read timeout + back-off, with room for a loaded box
FAULTS = ["hang", "status:500", "status:429", "wrong_dim", "nan"]
SEED = "The staging database is rebuilt every night from the kiwi snapshot"


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeEmbeddingServer]:
    with fake_embedding_server(dimension=DIMENSION) as server:
        yield server


@pytest.fixture
def remote_server(make_settings: SettingsFactory, fake: FakeEmbeddingServer) -> Iterator[LiveServer]:
    fake.set("ok")
    settings = make_settings(embedding_provider="openai", embedding_base_url=fake.url, embedding_model="fake-model",
                             embedding_api_key="sk-test-key", embedding_dimensions=DIMENSION,
                             embedding_timeout_s=TIMEOUT_S, embedding_max_retries=1)
    with run_server(settings) as server:
        yield server


async def _total(http: httpx.AsyncClient, url: str) -> int:
    response = await http.get(f"{url}/api/lancedb/stats")
    assert response.status_code == 200, response.text
    return int(response.json()["total"])


async def _refused_without_a_write(http: httpx.AsyncClient, mcp: Client, url: str, fault: str) -> float:
    before = await _total(http, url)
    started = time.monotonic()
    response = await http.post(f"{url}/api/lancedb/memories", json={"text": f"written while the embedder is {fault}"})
    elapsed = time.monotonic() - started
    assert response.status_code == 503, (fault, response.status_code, response.text)
    assert response.json()["code"] == "embedding_unavailable" and response.json()["detail"]
    assert int(response.headers["retry-after"]) >= 1
    assert "sk-test-key" not in response.text
    assert elapsed < BOUND_S, (fault, elapsed)
    tool = await mcp.call_tool("remember", {"content": f"tool write while the embedder is {fault}"})
    assert tool.is_error is True and tool.content[0].text.startswith("embedding_unavailable: ")  # type: ignore[union-attr]
    assert await _total(http, url) == before
    return elapsed


async def _still_serving(http: httpx.AsyncClient, mcp: Client, url: str, seed_id: str) -> None:
    assert (await http.get(f"{url}/healthz")).status_code == 200
    found = await http.get(f"{url}/api/lancedb/vector-search", params={"q": "kiwi snapshot", "limit": 5})
    assert found.status_code == 200 and found.headers["x-search-mode"] == "keyword_fallback"
    assert [hit["id"] for hit in found.json()] == [seed_id]
    recalled = await mcp.call_tool("recall", {"query": "kiwi snapshot"})
    assert recalled.is_error is False
    assert recalled.structured_content["mode"] == "keyword_fallback"  # type: ignore[index]
    assert [m["memory_id"] for m in recalled.structured_content["memories"]] == [seed_id]  # type: ignore[index]


def _assert_every_stored_vector_is_valid(server: LiveServer) -> None:
    """The invariant scan after the faults: no NaN/inf, zero or wrongly sized vector was ever written."""
    db = lancedb.connect(str(server.settings.db_path), read_consistency_interval=timedelta(0))
    rows = db.open_table(server.settings.table).to_arrow().select(["vector"]).to_pylist()
    assert len(rows) == 1 + len(FAULTS)  # the seed and one write after each recovery
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
        seeded = await http.post(f"{url}/api/lancedb/memories", json={"text": SEED})
        assert seeded.status_code == 200, seeded.text
        seed_id = seeded.json()["id"]
        for fault in FAULTS:
            fake.set(fault)
            latencies[fault] = await _refused_without_a_write(http, mcp, url, fault)
            await _still_serving(http, mcp, url, seed_id)
            fake.set("ok")
            before = await _total(http, url)
            recovered = await http.post(f"{url}/api/lancedb/memories", json={"text": f"after the {fault} fault"})
            assert recovered.status_code == 200, (fault, recovered.text)
            assert await _total(http, url) == before + 1
            vector = await http.get(f"{url}/api/lancedb/vector-search", params={"q": "kiwi snapshot"})
            assert vector.headers["x-search-mode"] == "vector"
    _assert_every_stored_vector_is_valid(remote_server)
    print("\nFAULTS remember 503 after: " + ", ".join(f"{f}={s:.2f}s" for f, s in latencies.items()))  # noqa: T201
