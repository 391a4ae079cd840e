"""memory-mcp reads memory-lancedb-pro's settings from openclaw.json and embeds exactly as the plugin's own code."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import pytest

from app.settings import Settings
from interop.conftest import PluginFactory, Rest
from tests.memory.embeddings.fake_server import FakeEmbeddingServer, fake_embedding_server
from tests.support.server import run_server

DIM = 16
KEY_ENV = "MLP_INTEROP_EMBED_KEY"


@pytest.fixture
def fake() -> Iterator[FakeEmbeddingServer]:
    with fake_embedding_server(dimension=DIM) as server:
        yield server


def _bodies(fake: FakeEmbeddingServer, start: int, end: int) -> list[dict[str, Any]]:
    """Request bodies, a bare-string input as the one-item list it means (the plugin sends one text as a string)."""
    bodies = []
    for request in fake.state.requests[start:end]:
        body = dict(request.body)
        body["input"] = [body["input"]] if isinstance(body["input"], str) else body["input"]
        bodies.append(body)
    return bodies


@pytest.mark.parametrize("profile", ["jina", "openai-compatible"])
def test_memory_mcp_sends_the_plugins_request_and_stores_the_plugins_vector(
    profile: str, fake: FakeEmbeddingServer, settings: Settings, tmp_path: Path, db_path: Path,
    make_plugin: PluginFactory, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-interop-0123456789")
    embedding: dict[str, Any] = {"provider": "openai-compatible", "apiKey": f"${{{KEY_ENV}}}", "baseURL": fake.url}
    if profile == "jina":
        embedding |= {"model": "jina-embeddings-v5-text-small", "dimensions": DIM, "requestDimensions": DIM,
                      "taskQuery": "retrieval.query", "taskPassage": "retrieval.passage", "normalized": True}
    else:
        embedding |= {"model": "bge-m3", "dimensions": DIM, "taskQuery": "ignored by this profile"}
    config = tmp_path / "openclaw.json"
    entry = {"enabled": True, "config": {"dbPath": str(db_path), "embedding": embedding}}
    document = {"plugins": {"entries": {"memory-lancedb-pro": entry}}}
    config.write_text("// written by the test\n" + json.dumps(document, indent=2), encoding="utf-8")
    text, query = "deploys happen on Fridays after the freeze", "when do deploys happen"

    plugin = make_plugin()
    assert plugin.call("initEmbedder", config=embedding) == {"dimensions": DIM}
    plugin_vector = np.asarray(plugin.call("embedPassage", text=text), dtype=np.float32)
    plugin.call("embedQuery", text=query)
    plugin_requests = len(fake.state.requests)

    values = settings.model_dump(include={"db_path", "kanban_db", "model_cache_dir", "log_format"})
    assert "MEMORY_MCP_EMBEDDING_PROVIDER" not in os.environ
    with run_server(Settings(**values, openclaw_config=config)) as live:
        rest = Rest(live.url)
        try:
            memory_id = rest.remember(text)
            assert [hit["id"] for hit in rest.recall(query, limit=1)] == [memory_id]
        finally:
            rest.client.close()

    plugin_bodies = _bodies(fake, 0, plugin_requests)
    ours = _bodies(fake, plugin_requests, len(fake.state.requests))
    assert ours == plugin_bodies, "memory-mcp's requests (remember, then recall) differ from the plugin's"
    headers = {request.headers["authorization"] for request in fake.state.requests}
    assert headers == {"Bearer sk-interop-0123456789"}
    assert {request.path for request in fake.state.requests} == {"/v1/embeddings"}

    # The plugin's store keeps its embedder's vector as given; memory-mcp's row must hold the same one.
    plugin.init(db_path, DIM)
    plugin_id = plugin.store(text, plugin_vector.tolist())["id"]
    table = lancedb.connect(str(db_path)).open_table("memories")
    rows = {row["id"]: row for row in table.search().where(f"id IN ('{memory_id}', '{plugin_id}')").to_list()}
    np.testing.assert_allclose(np.asarray(rows[memory_id]["vector"], dtype=np.float32),
                               np.asarray(rows[plugin_id]["vector"], dtype=np.float32), atol=1e-6)
    query_vector = plugin.call("embedQuery", text=query)
    found = [hit["entry"]["id"] for hit in plugin.vector_search(query_vector, limit=2)]
    assert sorted(found) == sorted([memory_id, plugin_id])
