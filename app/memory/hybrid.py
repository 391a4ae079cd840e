"""Hybrid recall: vector top-``POOL`` plus keyword top-``POOL`` in the scope, re-ranked by ``ranking``.

Why a keyword pool and not only a re-rank of the vector pool: with a weak embedder the memory that
shares the query's rare words (a name, ``TASK-00042``) is often not among the vector candidates at
all (docs/performance.md, Ranking). Keyword-only candidates get their cosine from their stored
vectors. Each row comes back with ``similarity``, its cosine, and ``score``, the hybrid value that
orders the list, so a list never shows a lower score above a higher one. The vector part stays an
exact search: the re-rank only reorders what it returned, plus the keyword candidates.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from app.memory import keyword
from app.memory.ports import MemoryReader
from app.memory.ranking import DEFAULT_LEXICAL_WEIGHTS, POOL, Candidate, RankingOptions, keyword_query, rerank


def lexical_weight(configured: float | None, provider: str) -> float:
    """The configured weight, else the one measured for ``provider`` (0, pure vector, if none was)."""
    if configured is not None:
        return float(configured)
    return DEFAULT_LEXICAL_WEIGHTS.get(provider, 0.0)


async def search(store: MemoryReader, query: str, vector: np.ndarray, where: str | None, top_k: int,
                 weight: float, keyword_pool_max_rows: int) -> list[dict[str, Any]]:
    """The ``top_k`` rows by ``score`` in [0, 1], the fusion of cosine and keyword score of ``ranking.rerank``
    (``weight`` the keyword's share), over both pools, each with its cosine as ``similarity``.

    The keyword pool scans the scope's text; above ``keyword_pool_max_rows`` only the vector pool is
    re-ranked (less accurate, still far above pure vector) so recall stays within a few times exact search.
    The vector pool is awaited without holding a thread: under 20 concurrent recalls, blocking
    threads on it capped the searches in flight at the default executor's six workers.
    """
    rows = await store.vector_search_async(vector, where, max(POOL, top_k))
    return await asyncio.to_thread(_complete, store, query, vector, where, top_k, weight, keyword_pool_max_rows, rows)


def _complete(store: MemoryReader, query: str, vector: np.ndarray, where: str | None, top_k: int, weight: float,
              keyword_pool_max_rows: int, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Add the keyword pool (small tables only), then re-rank (blocking: tokenizes ~100 texts)."""
    if store.size_hint() <= keyword_pool_max_rows:
        seen = {row["id"] for row in rows}
        lexical = [memory_id for memory_id, _ in keyword.rank(store, keyword_query(query), where, POOL)]
        rows = rows + store.rows_with_scores([memory_id for memory_id in lexical if memory_id not in seen], vector)
    candidates = [Candidate(str(row["id"]), row.get("text") or "", float(row["score"])) for row in rows]
    ranked = rerank(query, candidates, RankingOptions(lexical_weight=weight))
    by_id = {row["id"]: row for row in rows}
    return [{**by_id[candidate.id], "similarity": candidate.score, "score": score}
            for candidate, score in ranked[:top_k]]
