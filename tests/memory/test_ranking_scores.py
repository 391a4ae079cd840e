"""``score`` stays in [0, 1] and orders every list: the fusion's properties, then real transports."""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.memory.ranking import Candidate, RankingOptions, fuse, rerank, vector_score
from tests.conftest import SettingsFactory
from tests.mcp.clients import streamable_session
from tests.support.server import run_server

unit = st.floats(0, 1)
cosine = st.floats(-1, 1)
weight = st.floats(0, 10)
TEXTS = ["deploy notes for friday", "部署腳本放在 scripts 目錄", "部署脚本放在 scripts 目录", "TASK-00012 is blocked",
         "the cache layer failed", "Кэш перезапущен", ""]
QUERIES = ["deploy", "部署之前要做什么", "TASK-00012", "cache deploy friday", "кэш", "what is it"]


@given(cosine, unit, weight)
def test_the_fused_score_is_between_0_and_1(cos: float, lexical: float, w: float) -> None:
    score = float(fuse(np.array([cos]), np.array([lexical]), w)[0])
    assert 0.0 <= score <= 1.0


@given(cosine, cosine, unit, unit, weight)
def test_the_fused_score_never_falls_when_either_signal_rises(c1: float, c2: float, l1: float, l2: float,
                                                               w: float) -> None:
    low, high = fuse(np.array([min(c1, c2), min(c1, c2)]), np.array([min(l1, l2), min(l1, l2)]), w), \
        fuse(np.array([max(c1, c2), min(c1, c2)]), np.array([min(l1, l2), max(l1, l2)]), w)
    assert np.all(high >= low)


@given(st.lists(st.tuples(unit, unit), min_size=2, max_size=20), st.floats(0.01, 10))
def test_between_0_and_1_the_fusion_orders_as_cosine_plus_weighted_keyword_score(rows: list[tuple[float, float]],
                                                                               w: float) -> None:
    cos, lexical = np.array([c for c, _ in rows]), np.array([k for _, k in rows])
    fused, additive = fuse(cos, lexical, w), cos + w * lexical
    for i in range(len(rows)):
        for j in range(len(rows)):
            if additive[i] > additive[j] + 1e-9:
                assert fused[i] >= fused[j]


@given(cosine)
def test_a_pure_vector_score_is_the_cosine_clipped_to_0_and_1(cos: float) -> None:
    assert vector_score(cos) == min(max(cos, 0.0), 1.0)
    assert float(fuse(np.array([cos]), np.array([1.0]), 0.0)[0]) == vector_score(cos)


@given(st.lists(st.tuples(st.sampled_from(TEXTS), st.floats(-1, 1.0001)), min_size=1, max_size=15),
       st.sampled_from(QUERIES), weight, st.booleans())
def test_rerank_scores_are_between_0_and_1_and_never_increase_down_the_list(rows: list[tuple[str, float]], query: str,
                                                                            w: float, gate: bool) -> None:
    candidates = [Candidate(str(i), text, cos) for i, (text, cos) in enumerate(rows)]
    ranked = rerank(query, candidates, RankingOptions(lexical_weight=w, language_cap=gate))
    scores = [score for _, score in ranked]
    assert sorted(c.id for c, _ in ranked) == sorted(c.id for c in candidates)
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert scores == sorted(scores, reverse=True)


NOTES = ["status of TASK-00041 on the board", "the migration ticket TASK-00042 waits on the database owner",
         "部署腳本放在 scripts 目錄", "部署之前先跑冒煙測試", "deploys are frozen after 15:00 on Fridays",
         "zebra", "the staging database is reset every sunday", "数据库连接池大小设为 20"]
SEARCHES = ["status of TASK-00042", "部署之前要做什么", "database owner", "zebra crossing rules", "日本語の質問", "x"]


def _checked(hits: list[dict[str, Any]], context: object) -> None:
    scores = [hit["score"] for hit in hits]
    assert hits and all(0.0 <= s <= 1.0 for s in scores), (context, hits)
    assert all(a >= b for a, b in zip(scores, scores[1:], strict=False)), (context, scores)


@pytest.mark.parametrize("lexical_weight", [None, 1.0, 10.0], ids=["hash-default", "one", "max"])
async def test_every_search_list_scores_between_0_and_1_best_first_over_rest_and_mcp(
        make_settings: SettingsFactory, lexical_weight: float | None) -> None:
    with run_server(make_settings(rank_lexical_weight=lexical_weight)) as server:
        async with httpx.AsyncClient(base_url=server.url + "/api/lancedb", timeout=30) as rest, \
                streamable_session(server.url) as client:
            for text in NOTES:
                assert (await rest.post("/memories", json={"text": text})).status_code == 200
            for query in SEARCHES:
                _checked((await rest.get("/vector-search", params={"q": query, "limit": 8})).json(), query)
                found = await client.call_tool("recall", {"query": query, "top_k": 8})
                _checked(found.structured_content["memories"], query)  # type: ignore[index]
            for query in ("TASK-00042", "部署", "database"):
                _checked((await rest.get("/search", params={"q": query})).json(), query)
