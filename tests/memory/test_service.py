"""Behaviour of MemoryService against a real LanceDB table in tmp_path (hash embedder)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Sequence

import numpy as np
import pytest

from app.errors import InvalidInput
from app.memory.embeddings.base import EmbeddingError
from app.memory.embeddings.hashing import HashEmbedder
from app.memory.errors import InvalidScope, MemoryNotFound, ScopeForbidden
from app.memory.service import MemoryService
from tests.conftest import SettingsFactory


class FailingEmbedder(HashEmbedder):
    """The hash embedder with a switch that makes every call fail like a provider outage."""

    def __init__(self) -> None:
        super().__init__(256)
        self.down = False

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        if self.down:
            raise EmbeddingError("provider down")
        return await super().embed_documents(texts)

    async def embed_query(self, text: str) -> np.ndarray:
        if self.down:
            raise EmbeddingError("provider down")
        return await super().embed_query(text)


class ZeroEmbedder(HashEmbedder):
    """A broken provider that returns zero vectors without validating them."""

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return np.zeros((len(texts), self.dimension), dtype=np.float32)


async def _table_count(service: MemoryService) -> int:
    """Rows in the LanceDB table once every acknowledged write has been flushed into it."""
    await service.writer.flush()
    return service.store.count()


async def _vector(service: MemoryService, memory_id: str) -> np.ndarray:
    """The vector the table holds for ``memory_id``, after a flush."""
    await service.writer.flush()
    vector = service.store.get_vector(memory_id)
    assert vector is not None
    return vector


async def test_remember_stores_a_row_with_millisecond_timestamp_and_metadata(service: MemoryService) -> None:
    before = time.time_ns() // 1_000_000
    result = await service.remember("timestamps are in milliseconds", tags=["format", "time"], agent="claude-code")
    after = time.time_ns() // 1_000_000
    memory = await service.get(result.memory_id)
    assert result.ok and str(uuid.UUID(result.memory_id)) == result.memory_id  # the plugin's id form
    assert before <= memory.timestamp <= after
    assert memory.scope == "agent:claude-code"
    assert memory.category == "other" and memory.tags == ["format", "time"]  # neither names a plugin category
    assert memory.importance == pytest.approx(0.7)
    await service.writer.flush()
    raw = service.store.get_rows([result.memory_id], ["metadata"])[0]["metadata"]
    metadata = json.loads(raw)
    assert metadata["tags"] == ["format", "time"] and metadata["agent"] == "claude-code"
    assert metadata["embedding_model"] == "hash-bow-v1" and metadata["created"].endswith("Z")


async def test_stored_vectors_are_unit_length_never_zero(service: MemoryService) -> None:
    result = await service.remember("a vector must never be zero")
    vector = await _vector(service, result.memory_id)
    assert vector.dtype == np.float32 and vector.shape == (256,)
    assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-5)


async def test_a_provider_returning_zero_vectors_writes_nothing(make_settings: SettingsFactory) -> None:
    async with MemoryService.open(make_settings(), embedder=ZeroEmbedder()) as service:
        with pytest.raises(EmbeddingError):
            await service.remember("zero vector")
        assert await _table_count(service) == 0


async def test_embedder_failure_fails_remember_and_writes_nothing(make_settings: SettingsFactory) -> None:
    embedder = FailingEmbedder()
    async with MemoryService.open(make_settings(), embedder=embedder) as service:
        embedder.down = True
        with pytest.raises(EmbeddingError) as raised:
            await service.remember("will not be stored")
        assert raised.value.code == "embedding_unavailable"
        assert await _table_count(service) == 0


async def test_recall_falls_back_to_keyword_search_when_the_embedder_is_down(make_settings: SettingsFactory) -> None:
    embedder = FailingEmbedder()
    async with MemoryService.open(make_settings(), embedder=embedder) as service:
        stored = await service.remember("deploys happen on Fridays")
        embedder.down = True
        result = await service.recall("Fridays")
    assert result.mode == "keyword_fallback"
    assert [hit.id for hit in result.hits] == [stored.memory_id]


async def test_recall_ranks_the_identical_text_first_with_cosine_score_one(service: MemoryService) -> None:
    await service.remember("the build uses make")
    target = await service.remember("postgres runs on port 5433")
    result = await service.recall("postgres runs on port 5433", top_k=2)
    assert result.mode == "vector"
    assert result.hits[0].id == target.memory_id
    assert result.hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert result.hits[0].score >= result.hits[1].score


@pytest.mark.parametrize("agent_filter", ["antigravity", "agent:antigravity"])
async def test_recall_agent_filter_accepts_bare_and_prefixed_names(service: MemoryService, agent_filter: str) -> None:
    mine = await service.remember("shared fact", agent="antigravity")
    await service.remember("shared fact", agent="claude-code")
    result = await service.recall("shared fact", top_k=10, agent_filter=agent_filter)
    assert [hit.id for hit in result.hits] == [mine.memory_id]


@pytest.mark.parametrize("top_k", [0, 101, -1])
async def test_recall_top_k_is_bounded(service: MemoryService, top_k: int) -> None:
    with pytest.raises(InvalidInput):
        await service.recall("anything", top_k=top_k)


@pytest.mark.parametrize(("given", "stored"), [
    (None, "global"), ("global", "global"), ("claude-code", "agent:claude-code"),
    ("agent:x", "agent:x"), ("project:memory-mcp", "project:memory-mcp"), ("user:u1", "user:u1"),
])
async def test_agents_are_normalised_to_scopes(service: MemoryService, given: str | None, stored: str) -> None:
    result = await service.remember("scoped", agent=given)
    assert (await service.get(result.memory_id)).scope == stored


@pytest.mark.parametrize("scope", ["team:x", "agent:", "", "a b", "agent:x y", "global:x", "x' OR '1'='1"])
async def test_invalid_scopes_are_refused(service: MemoryService, scope: str) -> None:
    with pytest.raises(InvalidScope) as raised:
        await service.remember("nowhere", scope=scope)
    assert raised.value.code == "invalid_scope"
    assert await _table_count(service) == 0


async def test_a_duplicate_is_reported_but_still_written(service: MemoryService) -> None:
    first = await service.remember("use uv for python installs")
    second = await service.remember("use uv for python installs")
    assert first.duplicate is None
    assert second.duplicate is not None and second.duplicate.memory_id == first.memory_id
    assert second.duplicate.score == pytest.approx(1.0, abs=1e-5)
    assert second.memory_id != first.memory_id and await _table_count(service) == 2


async def test_concurrent_identical_remembers_never_report_themselves_as_their_duplicate(
    service: MemoryService,
) -> None:
    # The check runs while the row is being journaled, so it may already see the row: excluded by id.
    results = await asyncio.gather(*(service.remember("the deploy key lives in vault") for _ in range(8)))
    ids = {r.memory_id for r in results}
    assert len(ids) == 8 and await _table_count(service) == 8
    for result in results:
        assert result.duplicate is None or result.duplicate.memory_id in ids - {result.memory_id}
    assert (await service.remember("the deploy key lives in vault")).duplicate is not None


async def test_a_failed_duplicate_check_does_not_fail_an_acknowledged_write(
    service: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken_search(*args: object, **kwargs: object) -> list[dict[str, object]]:
        raise OSError("search failed")

    monkeypatch.setattr(service.store, "vector_search_async", broken_search)
    result = await service.remember("written even though the check failed")
    assert result.duplicate is None
    assert (await service.get(result.memory_id)).text == "written even though the check failed"


async def test_check_duplicate_uses_the_provider_default_threshold(service: MemoryService) -> None:
    stored = await service.remember("the api listens on 3002")
    check = await service.check_duplicate("the api listens on 3002")
    assert check.threshold == 0.9 and check.is_duplicate
    assert check.similar[0].memory_id == stored.memory_id and check.similar[0].content == "the api listens on 3002"
    unrelated = await service.check_duplicate("完全不同的內容")
    assert not unrelated.is_duplicate and unrelated.similar == []


async def test_settings_override_the_dedup_threshold(make_settings: SettingsFactory) -> None:
    async with MemoryService.open(make_settings(dedup_threshold=0.5)) as service:
        assert (await service.check_duplicate("anything")).threshold == 0.5
        with pytest.raises(InvalidInput):
            await service.check_duplicate("anything", threshold=1.5)


async def test_scope_tags_and_importance_changes_keep_the_vector_bit_exact(service: MemoryService) -> None:
    result = await service.remember("keep my vector", tags=["a"])
    before = await _vector(service, result.memory_id)
    updated = await service.update(result.memory_id, scope="project:p", tags=["b", "c"], importance=0.2)
    after = await _vector(service, result.memory_id)
    assert updated.scope == "project:p" and updated.tags == ["b", "c"] and updated.importance == pytest.approx(0.2)
    assert updated.text == "keep my vector" and updated.timestamp == (await service.get(result.memory_id)).timestamp
    assert before.tobytes() == after.tobytes()


async def test_a_text_change_recomputes_the_vector(service: MemoryService) -> None:
    result = await service.remember("old text about cats")
    before = await _vector(service, result.memory_id)
    await service.update(result.memory_id, text="new text about rockets")
    after = await _vector(service, result.memory_id)
    expected = await service.embedder.embed_documents(["new text about rockets"])
    assert before.tobytes() != after.tobytes()
    assert np.allclose(after, expected[0], atol=1e-6)
    assert (await service.recall("new text about rockets", top_k=1)).hits[0].id == result.memory_id


async def test_forget_removes_and_unknown_id_is_not_found(service: MemoryService) -> None:
    result = await service.remember("short lived")
    await service.forget(result.memory_id)
    with pytest.raises(MemoryNotFound):
        await service.get(result.memory_id)
    with pytest.raises(MemoryNotFound):
        await service.forget(result.memory_id)
    with pytest.raises(MemoryNotFound):
        await service.update("deadbeef", importance=0.1)


async def test_list_facts_matches_a_whole_tag_newest_first_and_paginates(service: MemoryService) -> None:
    ids = [(await service.remember(f"fact {i}", tags=["deploy", "ops"], agent="ci")).memory_id for i in range(5)]
    await service.remember("substring only", tags=["deployment"], agent="ci")
    await service.remember("other agent", tags=["deploy"], agent="other")
    page1 = await service.list_facts(agent="ci", tag="deploy", limit=2)
    page2 = await service.list_facts(agent="agent:ci", tag="deploy", limit=2, offset=2)
    page3 = await service.list_facts(agent="ci", tag="deploy", limit=2, offset=4)
    got = [m.id for m in page1 + page2 + page3]
    assert got == list(reversed(ids))
    assert [m.id for m in await service.list_facts(tag="ops")] == list(reversed(ids))


async def test_list_memories_filters_by_scope_and_category(service: MemoryService) -> None:
    a = await service.create("alpha", scope="project:p", category="x,y")
    await service.create("beta", scope="project:q", category="x")
    assert [m.id for m in await service.list_memories(scope="project:p")] == [a.memory_id]
    assert {m.text for m in await service.list_memories(category="x")} == {"alpha", "beta"}
    assert [m.id for m in await service.list_memories(category="y")] == [a.memory_id]


@pytest.mark.parametrize("text", ["", "   \n\t", "nul\x00byte", "escape \x1b[2J", "lone \ud800 surrogate"])
async def test_bad_text_is_refused_with_invalid_text(service: MemoryService, text: str) -> None:
    with pytest.raises(InvalidInput) as raised:
        await service.remember(text)
    assert raised.value.code == "invalid_text"


async def test_text_over_the_limit_is_refused_not_truncated(make_settings: SettingsFactory) -> None:
    async with MemoryService.open(make_settings(max_text_chars=100)) as service:
        ok = await service.remember("字" * 100)
        assert (await service.get(ok.memory_id)).text == "字" * 100
        with pytest.raises(InvalidInput, match="100") as raised:
            await service.remember("x" * 101)
        assert raised.value.code == "text_too_long" and await _table_count(service) == 1


async def test_tabs_newlines_and_unicode_round_trip_exactly(service: MemoryService) -> None:
    text = "line1\n\tline2\r\n👩‍👩‍👧 עברית e\u0301 😀"
    result = await service.remember(text)
    assert (await service.get(result.memory_id)).text == text


@pytest.mark.parametrize("tags", [["a,b"], [""], ["x" * 65], [f"t{i}" for i in range(33)], ["bad\x01"]])
async def test_bad_tags_are_refused(service: MemoryService, tags: list[str]) -> None:
    with pytest.raises(InvalidInput):
        await service.remember("tagged", tags=tags)


async def test_duplicate_tags_are_collapsed(service: MemoryService) -> None:
    result = await service.remember("tagged", tags=["a", " a ", "b"])
    assert (await service.get(result.memory_id)).tags == ["a", "b"]


@pytest.mark.parametrize("importance", [-0.1, 1.1, float("nan"), float("inf")])
async def test_importance_outside_zero_to_one_is_refused(service: MemoryService, importance: float) -> None:
    with pytest.raises(InvalidInput):
        await service.remember("weighted", importance=importance)


async def test_a_caller_writes_only_its_own_scope_and_global(make_settings: SettingsFactory) -> None:
    async with MemoryService.open(make_settings()) as service:
        own = await service.remember("mine", agent="alpha", caller="alpha")
        shared = await service.remember("shared", caller="alpha")
        assert (await service.get(shared.memory_id)).scope == "global"
        other = await service.remember("theirs", agent="beta")
        with pytest.raises(ScopeForbidden):
            await service.remember("impersonate", agent="beta", caller="alpha")
        with pytest.raises(ScopeForbidden):
            await service.forget(other.memory_id, caller="alpha")
        with pytest.raises(ScopeForbidden):
            await service.update(own.memory_id, scope="agent:beta", caller="alpha")
        await service.forget(own.memory_id, caller="alpha")
        assert await _table_count(service) == 2


async def test_without_global_writes_a_caller_defaults_to_its_own_scope(make_settings: SettingsFactory) -> None:
    async with MemoryService.open(make_settings(agent_may_write_global=False)) as service:
        result = await service.remember("private by default", caller="alpha")
        assert (await service.get(result.memory_id)).scope == "agent:alpha"
        with pytest.raises(ScopeForbidden):
            await service.remember("no global", scope="global", caller="alpha")


async def test_stats_count_per_scope_and_tag(service: MemoryService) -> None:
    await service.remember("one", tags=["a", "fact"], agent="x")
    await service.remember("two", tags=["a"])
    stats = await service.stats()
    assert stats.total == 2
    assert stats.scopes == {"agent:x": 1, "global": 1}
    assert stats.categories == {"fact": 1, "other": 1}
    assert stats.embedding.model == "hash-bow-v1"
    assert stats.embedding.dimension == 256 and isinstance(stats.embedding.dimension, int)


async def test_health_is_cheap_and_names_the_model(service: MemoryService) -> None:
    health = service.health()
    assert health["ready"] is True and health["provider"] == "hash" and health["dimension"] == 256
