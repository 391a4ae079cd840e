"""Fixtures for the HTTP providers: a fake server per test and embedders that get closed."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest

from app.memory.embeddings import Embedder, create_embedder
from app.memory.embeddings.remote import RemoteEmbedder
from tests.conftest import SettingsFactory
from tests.memory.embeddings.fake_server import FakeEmbeddingServer, fake_embedding_server

API_KEY = "sk-test-SENTINEL-0123456789"
DIMENSION = 8

RemoteFactory = Callable[..., Awaitable[RemoteEmbedder]]


@pytest.fixture
def fake() -> Iterator[FakeEmbeddingServer]:
    with fake_embedding_server(dimension=DIMENSION) as server:
        yield server


@pytest.fixture
async def make_remote(make_settings: SettingsFactory, fake: FakeEmbeddingServer) -> AsyncIterator[RemoteFactory]:
    """Build (and load) a jina/openai embedder against the fake server; closed after the test."""
    created: list[Embedder] = []

    async def factory(provider: str = "jina", *, load: bool = True, **overrides: Any) -> RemoteEmbedder:
        values: dict[str, Any] = {
            "embedding_provider": provider,
            "embedding_base_url": fake.url,
            "embedding_dimensions": DIMENSION,
            "embedding_timeout_s": 1.0,
            "embedding_max_retries": 2,
        }
        if provider == "jina":
            values["JINA_API_KEY"] = API_KEY
        else:
            values["embedding_model"] = "test-model"
            values["embedding_api_key"] = API_KEY
        values.update(overrides)
        embedder = create_embedder(make_settings(**values))
        created.append(embedder)
        assert isinstance(embedder, RemoteEmbedder)
        if load:
            await embedder.load()
        return embedder

    yield factory
    for embedder in created:
        await embedder.close()
