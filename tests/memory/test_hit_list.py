"""Result lists of the memory service: ordered by ``score``, with the cosine as ``similarity``, and each
identical text of a scope once (real LanceDB in tmp_path, hash embedder)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from app.memory.embeddings.base import EmbeddingError
from app.memory.embeddings.hashing import HashEmbedder
from app.memory.hit_list import collapse
from app.memory.models import MemoryHit
from app.memory.service import MemoryService
from tests.conftest import SettingsFactory

SAME = "the nightly backup runs at 02:00 UTC"


class SwitchableEmbedder(HashEmbedder):
    """The hash embedder that can be switched off like a provider outage."""

    def __init__(self) -> None:
        super().__init__(256)
        self.down = False

    async def embed_query(self, text: str) -> np.ndarray:
        if self.down:
            raise EmbeddingError("provider down")
        return await super().embed_query(text)

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return await super().embed_documents(texts)


def _hit(memory_id: str, text: str, scope: str = "global", score: float = 0.5) -> MemoryHit:
    return MemoryHit(id=memory_id, text=text, scope=scope, category="", tags=[], importance=0.7, timestamp=0,
                     score=score, similarity=score)


def test_collapse_keeps_the_first_copy_in_place_and_names_the_later_ones() -> None:
    hits = [_hit("a", "x", score=0.9), _hit("b", "y", score=0.8), _hit("c", "x", score=0.7),
            _hit("d", "x", "agent:z", score=0.6), _hit("e", "x", score=0.5)]
    kept = collapse(hits)
    assert [(hit.id, hit.duplicate_ids) for hit in kept] == [("a", ["c", "e"]), ("b", []), ("d", [])]


async def test_recall_shows_a_text_stored_three_times_once_and_still_fills_top_k(service: MemoryService) -> None:
    copies = [(await service.remember(SAME)).memory_id for _ in range(3)]
    others = [(await service.remember(f"the nightly backup note {n}")).memory_id for n in range(3)]
    result = await service.recall(SAME, top_k=3)
    assert len(result.hits) == 3
    first = result.hits[0]
    assert first.text == SAME and sorted([first.id, *first.duplicate_ids]) == sorted(copies)
    assert {hit.id for hit in result.hits[1:]} <= set(others)
    await service.writer.flush()
    assert service.store.count() == 6  # nothing deleted


async def test_many_copies_beyond_the_first_read_still_leave_top_k_distinct_hits(service: MemoryService) -> None:
    copies = [(await service.remember(SAME)).memory_id for _ in range(9)]
    other = (await service.remember("the weekly backup runs on sunday")).memory_id
    result = await service.recall(SAME, top_k=2)
    assert [hit.id for hit in result.hits][1] == other
    assert sorted([result.hits[0].id, *result.hits[0].duplicate_ids]) == sorted(copies)


async def test_the_same_text_in_two_scopes_is_two_hits(service: MemoryService) -> None:
    mine = (await service.remember(SAME, agent="claude-code")).memory_id
    theirs = (await service.remember(SAME, agent="antigravity")).memory_id
    result = await service.recall(SAME, top_k=5)
    assert sorted(hit.id for hit in result.hits) == sorted([mine, theirs])
    assert all(hit.duplicate_ids == [] for hit in result.hits)


async def test_keyword_search_and_the_keyword_fallback_show_copies_once(make_settings: SettingsFactory) -> None:
    embedder = SwitchableEmbedder()
    async with MemoryService.open(make_settings(), embedder=embedder) as service:
        copies = [(await service.remember(SAME)).memory_id for _ in range(2)]
        searched = await service.keyword_search("backup 02:00")
        embedder.down = True
        fallback = await service.recall("backup 02:00")
    for hits in (searched, fallback.hits):
        assert len(hits) == 1 and sorted([hits[0].id, *hits[0].duplicate_ids]) == sorted(copies)
        assert hits[0].similarity is None  # no vector was compared
    assert fallback.mode == "keyword_fallback"


async def test_without_hybrid_ranking_score_is_the_cosine_and_equals_similarity(service: MemoryService) -> None:
    ids = [(await service.remember(text)).memory_id for text in ("postgres runs on port 5433", "the build uses make")]
    query = "which port does postgres use"
    vector = await service.embedder.embed_query(query)
    journaled = await service.recall(query, top_k=2)  # answered from the journal's rows
    await service.writer.flush()
    stored = {memory_id: service.store.get_vector(memory_id) for memory_id in ids}
    indexed = await service.recall(query, top_k=2)  # answered from the vector index
    for result in (journaled, indexed):
        assert sorted(hit.id for hit in result.hits) == sorted(ids)
        for hit in result.hits:
            cosine = float(np.dot(vector, stored[hit.id]))  # unit vectors: the dot product is the cosine
            assert hit.similarity == pytest.approx(cosine, abs=1e-5) and hit.score == max(hit.similarity, 0.0)
        assert result.hits[0].score >= result.hits[1].score


async def test_with_hybrid_ranking_the_keyword_bonus_lifts_the_score_within_0_and_1(
        make_settings: SettingsFactory) -> None:
    async with MemoryService.open(make_settings(rank_lexical_weight=1.0)) as service:
        target = (await service.remember("ticket TASK-00042 waits on the database owner")).memory_id
        for n in (41, 43, 44):
            await service.remember(f"status of TASK-000{n} on the board")
        result = await service.recall("status of TASK-00042", top_k=4)
    assert result.hits[0].id == target
    scores = [hit.score for hit in result.hits]
    assert scores == sorted(scores, reverse=True)
    assert min(scores) >= 0 and max(scores) <= 1
    # Weight 1.0: the score is the mean of the clipped cosine and the keyword score, here the full one.
    assert result.hits[0].score == pytest.approx((max(result.hits[0].similarity or 0.0, 0.0) + 1.0) / 2)
    assert result.hits[0].similarity < max(hit.similarity or 0.0 for hit in result.hits[1:])
