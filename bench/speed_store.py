"""In-process parts of the speed benchmark: numpy brute force, the store's search, the embedder alone."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from app.memory import keyword
from app.memory.embeddings.base import Embedder
from app.memory.ranking import keyword_query
from app.memory.store import filters
from app.memory.store.table import Store
from bench.support.common import latency_summary_ms, top_k

K = 10
WARMUP = 3


def _timed(fn: Callable[[int], Any], n: int) -> tuple[list[float], list[Any]]:
    for i in range(min(WARMUP, n)):
        fn(i)
    latencies, results = [], []
    for i in range(n):
        start = time.perf_counter()
        results.append(fn(i))
        latencies.append(time.perf_counter() - start)
    return latencies, results


def numpy_reference(matrix: np.ndarray, queries: np.ndarray) -> tuple[dict[str, float], list[np.ndarray]]:
    """The physical reference: one matrix-vector product and a partial sort, vectors already in RAM."""
    latencies, results = _timed(lambda i: top_k(matrix @ queries[i], K), len(queries))
    return latency_summary_ms(latencies), results


def recall_vs_exact(
    found_ids: Sequence[Sequence[str]], matrix: np.ndarray, queries: np.ndarray, ids: Sequence[str],
    allowed: np.ndarray | None = None,
) -> float:
    """Mean share of the exact top-k found; a result tied with the k-th exact score (1e-5) counts as exact."""
    position = {memory_id: i for i, memory_id in enumerate(ids)}
    shares = []
    for qi, found in enumerate(found_ids):
        scores = matrix @ queries[qi]
        if allowed is not None:
            scores = np.where(allowed, scores, -np.inf)
        exact = top_k(scores, K)
        cut = scores[exact[-1]] - 1e-5
        good = sum(1 for memory_id in found[:K] if memory_id in position and scores[position[memory_id]] >= cut)
        shares.append(good / min(K, len(exact)))
    return float(np.mean(shares)) if shares else float("nan")


def store_search(
    store: Store, queries: np.ndarray, scope: str | None = None
) -> tuple[dict[str, float], list[list[str]]]:
    """``Store.vector_search`` alone (what recall runs after embedding), optionally scope-filtered."""
    where = filters.eq("scope", scope) if scope else None
    latencies, results = _timed(
        lambda i: [row["id"] for row in store.vector_search(queries[i], where, K)], len(queries)
    )
    return latency_summary_ms(latencies), results


def keyword_search(store: Store, queries: Sequence[str]) -> dict[str, float]:
    """The service's substring keyword search (what a hybrid ranking would add per recall), top-50."""
    terms = [keyword_query(q) for q in queries]
    latencies, _ = _timed(lambda i: keyword.search(store, terms[i], None, 50), len(terms))
    return latency_summary_ms(latencies)


def cache_search(store: Store, queries: np.ndarray, scope: str | None = None) -> dict[str, Any]:
    """``Store.vector_search`` with the vector cache on (the batch thread included): load time, size, latency."""
    assert store.cache is not None, "open the store with vector_cache=True"
    where = filters.eq("scope", scope) if scope else None
    latencies, results = _timed(
        lambda i: [row["id"] for row in store.vector_search(queries[i], where, K)], len(queries)
    )
    return {"latency": latency_summary_ms(latencies), "results": results,
            "reload_s": round(store.cache.last_reload_s, 3), "matrix_mb": round(store.cache.nbytes / 2**20, 1)}


def concurrent_cache_search(store: Store, queries: np.ndarray, threads: int) -> dict[str, Any]:
    """``threads`` threads searching at once (as concurrent duplicate checks do): wall time per search."""
    assert store.batcher is not None, "open the store with vector_cache=True"
    batches, searches = store.batcher.batches, store.batcher.searches
    work = [queries[i % len(queries)] for i in range(max(threads * 4, len(queries)))]
    with ThreadPoolExecutor(threads) as pool:
        start = time.perf_counter()
        list(pool.map(lambda q: store.vector_search(q, None, K), work))
        wall = time.perf_counter() - start
    products = store.batcher.batches - batches
    return {"threads": threads, "searches": len(work), "ms_per_search": round(wall * 1000 / len(work), 3),
            "per_batch": round((store.batcher.searches - searches) / max(products, 1), 1)}


async def embedder_alone(embedder: Embedder, texts: Sequence[str]) -> dict[str, float]:
    """One query at a time through the provider (worker thread included), as recall calls it."""
    for text in texts[:WARMUP]:
        await embedder.embed_query(text)
    latencies = []
    for text in texts:
        start = time.perf_counter()
        await embedder.embed_query(text)
        latencies.append(time.perf_counter() - start)
    return latency_summary_ms(latencies)
