"""The service's embedding calls: remember waits for a loading model within its deadline, recall within its budget."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import anyio
import numpy as np
import pytest

from app.memory.embedding_calls import EmbeddingCalls
from app.memory.embeddings import EmbeddingError
from app.memory.embeddings.hashing import HashEmbedder
from app.memory.service import MemoryService
from tests.conftest import SettingsFactory
from tests.memory.embeddings.fake_server import fake_embedding_server, refused_url
from tests.memory.embeddings.gated_model import GatedModel


@pytest.fixture
async def gated() -> AsyncIterator[GatedModel]:
    model = GatedModel()
    yield model
    model.allow_load.set()
    model.allow_encode.set()
    await model.close()


def _calls(make_settings: SettingsFactory, model: GatedModel, **overrides: float) -> EmbeddingCalls:
    return EmbeddingCalls(model, make_settings(**overrides))


async def test_recall_falls_back_at_once_while_the_model_loads(make_settings: SettingsFactory,
                                                               gated: GatedModel) -> None:
    calls = _calls(make_settings, gated)
    calls.start_loading()
    started = time.monotonic()
    outcome = await calls.query_within_budget("where is the kiwi snapshot")
    assert isinstance(outcome, EmbeddingError) and "still loading" in outcome.message
    assert time.monotonic() - started < 0.5
    assert calls.status()["loading"] is True and gated.encoded == []
    gated.allow_load.set()
    await calls.wait_loaded()
    assert calls.status()["loading"] is False and calls.load_seconds is not None
    await calls.close()


async def test_a_late_query_gives_up_after_the_budget_and_still_finishes_in_the_background(
        make_settings: SettingsFactory, gated: GatedModel) -> None:
    calls = _calls(make_settings, gated, recall_embedding_budget_s=0.3)
    gated.allow_load.set()
    await calls.load()
    gated.allow_encode.clear()  # the model is busy
    started = time.monotonic()
    outcome = await calls.query_within_budget("a query the model answers late")
    elapsed = time.monotonic() - started
    assert isinstance(outcome, EmbeddingError) and "0.3s recall budget" in outcome.message
    assert 0.3 <= elapsed < 2.0
    gated.allow_encode.set()
    assert await anyio.to_thread.run_sync(gated.encoded_event.wait, 10)  # not cancelled: its batch ran
    assert gated.encoded == [["a query the model answers late"]]
    await calls.close()


async def test_remember_waits_for_a_loading_model_but_not_past_its_deadline(make_settings: SettingsFactory,
                                                                             gated: GatedModel) -> None:
    calls = _calls(make_settings, gated, embedding_deadline_s=0.5)
    calls.start_loading()
    started = time.monotonic()
    with pytest.raises(EmbeddingError, match="0.5s deadline .the embedding model is still loading.") as caught:
        await calls.document("written while the model loads")
    assert 0.5 <= time.monotonic() - started < 3.0
    assert caught.value.code == "embedding_unavailable" and caught.value.retry_after_s == 1
    gated.embed_requested.clear()
    async with anyio.create_task_group() as group:
        vectors: list[np.ndarray] = []

        async def remember() -> None:
            vectors.append(await calls.document("written once the model is there"))

        group.start_soon(remember)
        assert await anyio.to_thread.run_sync(gated.embed_requested.wait, 10)  # it is waiting for the model
        gated.allow_load.set()
    expected = HashEmbedder(gated.dimension)._vector("written once the model is there")
    np.testing.assert_allclose(vectors[0], expected / np.linalg.norm(expected), atol=1e-6)
    assert gated.encoded == [["written once the model is there"]]  # the one that gave up never reached it
    await calls.close()


@pytest.mark.parametrize("fault", ["hang", "dead"])
async def test_recall_with_a_hung_or_dead_provider_answers_from_keywords_from_the_first_call(
        make_settings: SettingsFactory, caplog: pytest.LogCaptureFixture, fault: str) -> None:
    seed = "The staging database is rebuilt every night from the kiwi snapshot"
    with fake_embedding_server(dimension=8) as fake:
        url = fake.url if fault == "hang" else refused_url()
        settings = make_settings(embedding_provider="openai", embedding_base_url=url, embedding_model="fake-model",
                                 embedding_api_key="sk-test-key", embedding_dimensions=8)
        assert settings.recall_embedding_budget_s == 1.0  # the default: what leaves room for 2 s in all
        async with MemoryService.open(settings) as service:
            if fault == "hang":
                await service.create(seed)
                fake.set("hang")  # connections are accepted, requests read, and never answered
            started = time.monotonic()
            result = await service.recall("kiwi snapshot")
            elapsed = time.monotonic() - started
    assert result.mode == "keyword_fallback"
    assert [hit.text for hit in result.hits] == ([seed] if fault == "hang" else [])
    [why] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("recall falls back")]
    if fault == "hang":  # only the budget ended the wait (the provider's read timeout is 10 s)
        assert why.endswith("no query embedding within the 1s recall budget")
    print(f"\nfirst recall, provider {fault}: keyword_fallback after {elapsed:.2f} s ({why})")  # noqa: T201
