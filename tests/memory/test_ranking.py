"""Ranking: the pure re-ranking of ``app.memory.ranking`` and the hybrid recall built on it."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest

from app.memory.ranking import POOL, Candidate, RankingOptions, bm25_scores, keyword_query, rerank, tokenize
from app.memory.service import MemoryService
from tests.conftest import SettingsFactory


def _ids(ranked: list[tuple[Candidate, float]]) -> list[str]:
    return [c.id for c, _ in ranked]


def test_default_options_keep_the_cosine_order() -> None:
    candidates = [Candidate("a", "alpha", 0.9), Candidate("b", "beta", 0.8), Candidate("c", "alpha beta", 0.7)]
    assert RankingOptions().is_identity
    assert _ids(rerank("alpha beta", candidates, RankingOptions())) == ["a", "b", "c"]


def test_a_query_sharing_no_word_with_any_memory_keeps_its_vector_order() -> None:
    candidates = [Candidate("a", "the cache layer failed after deploy", 0.61),
                  Candidate("b", "timestamps are stored in milliseconds", 0.60)]
    ranked = rerank("時間戳必須用毫秒", candidates, RankingOptions(lexical_weight=0.5))
    assert _ids(ranked) == ["a", "b"]
    assert [score for _, score in ranked] == [0.61, 0.60]


def test_lexical_weight_lifts_an_exact_identifier_over_a_slightly_closer_vector_hit() -> None:
    candidates = [Candidate("a", "the board moved a task to review", 0.62),
                  Candidate("b", "TASK-00012 is blocked on the migration", 0.60)]
    assert _ids(rerank("TASK-00012 status", candidates, RankingOptions(lexical_weight=0.1))) == ["b", "a"]


def test_a_small_lexical_weight_cannot_override_a_clear_vector_gap() -> None:
    candidates = [Candidate("a", "deploys happen on fridays", 0.90), Candidate("b", "status status status", 0.40)]
    assert _ids(rerank("status", candidates, RankingOptions(lexical_weight=0.1))) == ["a", "b"]


def test_chinese_runs_are_tokenized_as_bigrams_so_keyword_scores_find_substrings() -> None:
    assert tokenize("timestamp 必須用毫秒") == ["timestamp", "必須", "須用", "用毫", "毫秒"]
    scores = bm25_scores("毫秒", ["memory-mcp timestamp 必須用毫秒", "nothing related"])
    assert scores[0] > 0 and scores[1] == 0


def test_recency_weight_prefers_the_newer_of_two_equally_similar_memories() -> None:
    day = 86_400_000
    candidates = [Candidate("old", "x", 0.5, timestamp_ms=0), Candidate("new", "y", 0.5, timestamp_ms=60 * day)]
    ranked = rerank("q", candidates, RankingOptions(recency_weight=0.05), now_ms=60 * day)
    assert _ids(ranked) == ["new", "old"]


def test_the_keyword_query_keeps_content_words_once_and_drops_stop_words() -> None:
    assert keyword_query("When did the team move the board to the new server?") == "team move board new server"
    assert keyword_query("what is it") == "what is it"  # nothing but stop words: search the text as written


# --- hybrid recall through the service (hash embedder, real LanceDB) --------------------------------

TARGET = "the migration ticket TASK-00042 waits on the database owner"
NEAR_MISSES = [f"status of TASK-000{n} on the board" for n in (41, 43, 44, 45, 46, 47)]
ENGLISH_NOTES = ["the cache layer failed after deploy", "timestamps are stored in milliseconds",
                 "deploy scripts live in the scripts folder", "back up the database every day"]


def _open(make_settings: SettingsFactory, weight: float | None) -> AbstractAsyncContextManager[MemoryService]:
    return MemoryService.open(make_settings(rank_lexical_weight=weight))


async def _fill(service: MemoryService, texts: list[str]) -> dict[str, str]:
    return {(await service.remember(text)).memory_id: text for text in texts}


async def _vector_rows(service: MemoryService, query: str, limit: int) -> list[dict[str, Any]]:
    """The store's pure cosine ranking, the reference the hybrid is compared with."""
    return service.store.vector_search(await service.embedder.embed_query(query), None, limit)


async def test_hybrid_recall_puts_an_exact_identifier_first_that_the_vector_ranks_lower(
        make_settings: SettingsFactory) -> None:
    async with _open(make_settings, 1.0) as service:
        ids = await _fill(service, [*NEAR_MISSES, TARGET])
        target = next(i for i, text in ids.items() if text == TARGET)
        query = "status of TASK-00042"
        vector = await _vector_rows(service, query, 7)
        assert [row["id"] for row in vector].index(target) > 0  # the premise: by cosine alone it is not first
        hits = (await service.recall(query, top_k=3)).hits
    assert hits[0].id == target
    cosine = {row["id"]: row["score"] for row in vector}
    assert [hit.score for hit in hits] == pytest.approx([cosine[hit.id] for hit in hits], abs=1e-5)


async def test_a_keyword_only_candidate_beyond_the_vector_pool_is_found_with_its_cosine(
        make_settings: SettingsFactory) -> None:
    near_misses = [f"status of TASK-{n:05d} on the board" for n in range(100, 100 + POOL + 10)]
    query = "status of TASK-00042"
    async with _open(make_settings, 1.0) as service:
        # Every query word is in it, so the keyword pool (term coverage) ranks it first.
        ids = await _fill(service, [*near_misses, f"status: {TARGET}"])
        target = next(i for i, text in ids.items() if text.startswith("status:"))
        vector = await _vector_rows(service, query, len(ids))
        assert target not in {row["id"] for row in vector[:POOL]}  # only the keyword pool can bring it
        hits = (await service.recall(query, top_k=5)).hits
    assert hits[0].id == target
    assert hits[0].score == pytest.approx(next(r["score"] for r in vector if r["id"] == target), abs=1e-5)


async def test_above_the_keyword_pool_row_limit_only_the_vector_pool_is_reranked(
        make_settings: SettingsFactory) -> None:
    near_misses = [f"status of TASK-{n:05d} on the board" for n in range(100, 100 + POOL + 10)]
    query = "status of TASK-00042"
    settings = make_settings(rank_lexical_weight=1.0, rank_keyword_pool_max_rows=len(near_misses))
    async with MemoryService.open(settings) as service:
        ids = await _fill(service, [*near_misses, f"status: {TARGET}"])
        target = next(i for i, text in ids.items() if text.startswith("status:"))
        vector = await _vector_rows(service, query, len(ids))
        hits = (await service.recall(query, top_k=POOL)).hits
    # The store now holds more rows than the limit: no text scan, so the keyword-only memory stays out.
    assert target not in {hit.id for hit in hits}
    cutoff = vector[POOL - 1]["score"] - 1e-6  # the vector pool, ties at its edge included
    assert {hit.id for hit in hits} <= {row["id"] for row in vector if row["score"] >= cutoff}


async def test_a_chinese_query_over_english_notes_keeps_the_vector_order(make_settings: SettingsFactory) -> None:
    query = "部署腳本放在哪個目錄"
    async with _open(make_settings, 1.0) as service:
        await _fill(service, ENGLISH_NOTES)
        hybrid = (await service.recall(query, top_k=4)).hits
        vector = await _vector_rows(service, query, 4)
    assert [hit.id for hit in hybrid] == [row["id"] for row in vector]
    assert [hit.score for hit in hybrid] == pytest.approx([row["score"] for row in vector], abs=1e-6)


@pytest.mark.parametrize("weight", [0.0, None], ids=["zero", "hash-default"])
async def test_lexical_weight_zero_gives_exactly_the_vector_order(make_settings: SettingsFactory,
                                                              weight: float | None) -> None:
    query = "status of TASK-00042"
    async with _open(make_settings, weight) as service:
        await _fill(service, [*NEAR_MISSES, TARGET])
        hits = (await service.recall(query, top_k=7)).hits
        vector = await _vector_rows(service, query, 7)
    assert [(hit.id, hit.score) for hit in hits] == [(row["id"], row["score"]) for row in vector]


async def test_keyword_only_candidates_stay_inside_the_scope(make_settings: SettingsFactory) -> None:
    async with _open(make_settings, 1.0) as service:
        other = (await service.remember(TARGET, scope="project:other")).memory_id
        await _fill(service, NEAR_MISSES)
        hits = (await service.recall("TASK-00042", top_k=10, scope="global")).hits
    assert other not in {hit.id for hit in hits} and len(hits) == len(NEAR_MISSES)

