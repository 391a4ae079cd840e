"""Jina and OpenAI-compatible providers against a real local HTTP server: request shapes."""

from __future__ import annotations

import numpy as np
import pytest

from app.errors import InvalidInput
from app.memory.embeddings import create_embedder
from app.memory.embeddings.remote import USER_AGENT, embeddings_endpoint
from tests.conftest import SettingsFactory
from tests.memory.embeddings.fake_server import FakeEmbeddingServer, vector_for
from tests.memory.embeddings.remote_support import API_KEY, DIMENSION, RemoteFactory


async def test_jina_documents_are_posted_as_retrieval_passages_with_key_and_user_agent(
    make_remote: RemoteFactory, fake: FakeEmbeddingServer
) -> None:
    embedder = await make_remote("jina")
    vectors = await embedder.embed_documents(["first text", "second text"])
    (request,) = fake.state.requests
    assert request.path == "/v1/embeddings"
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert request.headers["user-agent"] == USER_AGENT == "memory-mcp/0.1"
    assert request.headers["content-type"] == "application/json"
    assert request.body == {
        "model": "jina-embeddings-v5-text-small",
        "task": "retrieval.passage",
        "input": ["first text", "second text"],
        "normalized": True,
        "embedding_type": "float",
        "dimensions": DIMENSION,
    }
    # the fake answers in reverse order; rows come back in input order by "index"
    expected = np.array([vector_for("first text", DIMENSION), vector_for("second text", DIMENSION)])
    np.testing.assert_allclose(vectors, expected, atol=1e-6)


async def test_jina_queries_use_the_retrieval_query_task(make_remote: RemoteFactory, fake: FakeEmbeddingServer) -> None:
    embedder = await make_remote("jina")
    vector = await embedder.embed_query("where are timestamps documented")
    assert vector.shape == (DIMENSION,)
    assert fake.state.requests[0].body["task"] == "retrieval.query"


async def test_jina_without_configured_dimensions_uses_the_models_native_size(
    make_remote: RemoteFactory, fake: FakeEmbeddingServer
) -> None:
    embedder = await make_remote("jina", embedding_dimensions=None)
    assert embedder.dimension == 1024 and fake.hits == 0
    assert embedder.identity == {"provider": "jina", "model": "jina-embeddings-v5-text-small", "dimension": "1024"}


async def test_texts_are_sent_in_batches_of_the_configured_size(
    make_remote: RemoteFactory, fake: FakeEmbeddingServer
) -> None:
    embedder = await make_remote("jina", embedding_batch_size=2)
    texts = [f"text {i}" for i in range(5)]
    vectors = await embedder.embed_documents(texts)
    assert [request.body["input"] for request in fake.state.requests] == [texts[0:2], texts[2:4], texts[4:5]]
    np.testing.assert_allclose(vectors, [vector_for(t, DIMENSION) for t in texts], atol=1e-6)


async def test_an_empty_list_needs_no_request(make_remote: RemoteFactory, fake: FakeEmbeddingServer) -> None:
    embedder = await make_remote("jina")
    assert (await embedder.embed_documents([])).shape == (0, DIMENSION)
    assert fake.hits == 0


async def test_openai_posts_model_and_input_and_sends_dimensions_when_configured(
    make_remote: RemoteFactory, fake: FakeEmbeddingServer
) -> None:
    embedder = await make_remote("openai")
    await embedder.embed_documents(["a"])
    await embedder.embed_query("b")
    assert [request.body for request in fake.state.requests] == [
        {"model": "test-model", "input": ["a"], "dimensions": DIMENSION},
        {"model": "test-model", "input": ["b"], "dimensions": DIMENSION},
    ]
    assert fake.state.requests[0].headers["authorization"] == f"Bearer {API_KEY}"
    assert fake.state.requests[0].headers["user-agent"] == USER_AGENT


async def test_openai_discovers_the_dimension_with_one_probe_when_not_configured(
    make_remote: RemoteFactory, fake: FakeEmbeddingServer
) -> None:
    embedder = await make_remote("openai", embedding_dimensions=None, embedding_api_key=None)
    assert embedder.dimension == DIMENSION
    (probe,) = fake.state.requests
    assert "dimensions" not in probe.body
    assert "authorization" not in probe.headers  # no key configured, none sent
    assert (await embedder.embed_documents(["x"])).shape == (1, DIMENSION)


def test_the_endpoint_accepts_base_urls_with_or_without_v1() -> None:
    assert embeddings_endpoint("http://127.0.0.1:11434/v1") == "http://127.0.0.1:11434/v1/embeddings"
    assert embeddings_endpoint("http://127.0.0.1:11434/") == "http://127.0.0.1:11434/v1/embeddings"
    assert embeddings_endpoint("https://h/v1/embeddings") == "https://h/v1/embeddings"
    with pytest.raises(InvalidInput, match="http"):
        embeddings_endpoint("ftp://h/v1")


def test_jina_without_an_api_key_is_refused_at_construction(make_settings: SettingsFactory) -> None:
    with pytest.raises(InvalidInput, match="JINA_API_KEY"):
        create_embedder(make_settings(embedding_provider="jina"))


@pytest.mark.parametrize(
    ("overrides", "missing"),
    [
        ({}, "MEMORY_MCP_EMBEDDING_BASE_URL and MEMORY_MCP_EMBEDDING_MODEL"),
        ({"embedding_model": "m"}, "MEMORY_MCP_EMBEDDING_BASE_URL"),
        ({"embedding_base_url": "http://127.0.0.1:1/v1"}, "MEMORY_MCP_EMBEDDING_MODEL"),
    ],
)
def test_openai_without_base_url_or_model_is_refused_with_the_missing_names(
    make_settings: SettingsFactory, overrides: dict[str, str], missing: str
) -> None:
    with pytest.raises(InvalidInput, match=f"needs {missing} "):
        create_embedder(make_settings(embedding_provider="openai", **overrides))
