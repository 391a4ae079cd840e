"""Exact (brute-force) top-k and the retrieval metrics the benchmarks report."""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` highest scores, best first (ties broken by lower index, deterministically)."""
    k = min(k, scores.shape[-1])
    if k <= 0:
        return np.empty(0, dtype=np.int64)
    n = scores.shape[-1]
    candidates = np.argpartition(-scores, k - 1)[:k] if k < n else np.arange(n)
    order = np.lexsort((candidates, -scores[candidates]))
    return candidates[order]


def cosine_top_k(matrix: np.ndarray, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact cosine top-k of unit ``query`` against unit rows of ``matrix``: (indices, scores)."""
    scores = matrix @ query
    idx = top_k(scores, k)
    return idx, scores[idx]


def hit_at_k(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    """1.0 when at least one relevant item is in the first ``k`` results (the 'any-hit' recall@k)."""
    return 1.0 if any(item in relevant for item in ranked[:k]) else 0.0


def fraction_at_k(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    """Fraction of the relevant items found in the first ``k`` results (the 'evidence-fraction' recall@k)."""
    if not relevant:
        return 0.0
    return len(set(ranked[:k]) & set(relevant)) / len(relevant)


def overlap_at_k(a: Sequence[str], b: Sequence[str], k: int) -> float:
    """|top-k(a) ∩ top-k(b)| / k: 1.0 when two searches return the same set of k results."""
    denominator = min(k, max(len(a[:k]), len(b[:k]), 1))
    return len(set(a[:k]) & set(b[:k])) / denominator
