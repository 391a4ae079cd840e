"""Projected score bounds: never below the true score, so threshold searches stay exact while they prune."""

from __future__ import annotations

import numpy as np
import pytest

from app.memory.embeddings.hashing import HashEmbedder
from app.memory.index import Query, VectorCache, block_matrix, exact_top, score_bounds, vector_cache
from app.memory.index.quantized_matrix import Snapshot
from app.memory.index.score_bounds import ScoreBounds, candidates
from app.memory.rows import new_row
from app.memory.store import filters
from app.memory.store.table import Store
from tests.conftest import SettingsFactory

DIM = 64
EMBEDDER = HashEmbedder(DIM)


def clustered(count: int, seed: int) -> np.ndarray:
    """Unit vectors near an 8-dimensional subspace, as sentence embeddings are near a low-rank one."""
    rng = np.random.default_rng(seed)
    mixing = np.random.default_rng(0).standard_normal((8, DIM))  # the same subspace for every seed
    vectors = rng.standard_normal((count, 8)) @ mixing + 0.3 * rng.standard_normal((count, DIM))
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def near_copies(rows: np.ndarray, seed: int, noise: float = 0.05) -> np.ndarray:
    rng = np.random.default_rng(seed)
    copies = rows + noise * rng.standard_normal(rows.shape).astype(np.float32)
    return (copies / np.linalg.norm(copies, axis=1, keepdims=True)).astype(np.float32)


def fitted(matrix: np.ndarray) -> ScoreBounds:
    bounds = ScoreBounds(DIM)
    bounds.fit(lambda positions: matrix[positions], len(matrix))
    return bounds


def test_the_bound_is_never_below_the_true_score() -> None:
    matrix = clustered(3_000, 1)
    bounds = fitted(matrix)
    for queries in (clustered(50, 2), near_copies(matrix[:50], 3), np.eye(DIM, dtype=np.float32)[:20]):
        projected_rows = bounds.project(matrix)
        projected_queries = bounds.project(queries)
        upper = projected_queries @ projected_rows.T
        assert np.all(upper >= queries @ matrix.T - 1e-5)


def test_candidates_hold_every_row_at_the_threshold_and_few_others() -> None:
    matrix = clustered(3_000, 1)
    bounds = fitted(matrix)
    queries = near_copies(matrix[::300], 4)  # ten queries, each a near copy of one row
    snapshot = bounds.snapshot(len(matrix))
    assert snapshot is not None and bounds.basis is not None
    found = candidates(snapshot, bounds.basis, len(matrix), queries, np.full(len(queries), 0.9, dtype=np.float32))
    exact = queries @ matrix.T
    for qi, positions in enumerate(found):
        assert set(np.flatnonzero(exact[qi] >= 0.9)) <= set(positions.tolist())
        assert qi * 300 in positions
        assert len(positions) < 0.05 * len(matrix)  # the projection pruned almost every row


def test_bounds_cover_appended_rows_and_ignore_a_gap() -> None:
    matrix = clustered(300, 6)
    bounds = fitted(matrix[:200])
    bounds.put(200, matrix[200:])
    assert bounds.n == 300 and bounds.snapshot(300) is not None
    bounds.put(400, matrix[:10])  # not contiguous: refused, and the bounds no longer cover row 400
    assert bounds.n == 300 and bounds.snapshot(301) is None


def _rows(vectors: np.ndarray, scope: str, tag: str) -> list[dict[str, object]]:
    return [new_row(f"memory {tag}-{i}", v, scope, ["t"], 0.7, None, EMBEDDER.model) for i, v in enumerate(vectors)]


def test_threshold_searches_through_the_cache_equal_exact_search_as_it_grows_and_compacts(
    make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(block_matrix, "BLOCK_ROWS", 7)
    monkeypatch.setattr(score_bounds, "FIT_MIN_ROWS", 50)
    gathered: list[int] = []
    real_rows_at = Snapshot.rows_at

    def counting_rows_at(snap: Snapshot, positions: np.ndarray) -> np.ndarray:
        gathered.append(len(positions))
        return real_rows_at(snap, positions)

    monkeypatch.setattr(Snapshot, "rows_at", counting_rows_at)
    store = Store.open(make_settings(embedding_dimensions=DIM), EMBEDDER)
    base = clustered(160, 7)
    store.add(_rows(base[:100], "global", "g") + _rows(base[100:], "agent:x", "x"))
    cache = VectorCache(DIM, store.row_columns, scratch_dir=store.db_path)
    cache.reload(store.table)
    assert cache._bounds.basis is not None and cache._bounds.n == 160

    def check() -> None:
        rows = store.scan(None, ["vector"]).num_rows
        queries = np.vstack([near_copies(base[::40], 8), clustered(3, 9)])
        asked: list[Query] = []
        expected: list[list[dict[str, object]]] = []
        for query in queries:
            for scope in (None, "global", "agent:x"):
                where = filters.eq("scope", scope) if scope else None
                exact = store.lancedb_search(query, where, rows)
                for threshold in (0.0, 0.5, 0.9, 0.97):
                    asked.append(Query(query, scope, 5, threshold))
                    expected.append([r for r in exact if r["score"] >= threshold][:5])
        # One by one, then the high thresholds as one batch (their candidates gathered together),
        # every other one asking for the id alone, as a duplicate check does.
        batch = [i for i, q in enumerate(asked) if q.min_score is not None and q.min_score >= 0.9]
        answers = [cache.search(q.vector, q.scope, q.limit, store.version(), q.min_score) for q in asked]
        slim = [n // 2 % 2 == 1 for n in range(len(batch))]  # both thresholds of every other scope
        mixed = [asked[i]._replace(columns=("id",) if s else None) for s, i in zip(slim, batch, strict=True)]
        together = cache.search_many(mixed, store.version())
        for i, found in [*enumerate(answers), *zip(batch, together, strict=True)]:
            assert found is not None
            assert [r["id"] for r in found] == [r["id"] for r in expected[i]], asked[i][1:]
            assert np.allclose([r["score"] for r in found], [r["score"] for r in expected[i]], atol=1e-5)
        id_only = [found or [] for s, found in zip(slim, together, strict=True) if s]
        full = [found or [] for s, found in zip(slim, together, strict=True) if not s]
        assert any(id_only) and all(set(r) == {"id", "score"} for found in id_only for r in found)
        assert any(full) and all(set(r) > {"id", "text", "scope", "score"} for found in full for r in found)

    check()
    assert gathered and min(gathered) < 10  # high thresholds scored a handful of rows, not all 160
    added = _rows(near_copies(base[:30], 10), "agent:x", "a")
    before = store.version()
    store.add(added)
    cache.apply_add(added, before, store.version())
    assert cache._bounds.n == cache._n == 190
    for memory_id in [r["id"] for r in store.scan(None, ["id"]).to_pylist()[:60]]:
        before = store.version()
        store.delete(memory_id)
        cache.apply_delete([memory_id], before, store.version())
    assert cache._n < 190 and cache._bounds.n == cache._n  # compacted, bounds rebuilt with the rows
    check()
    assert cache.reloads == 1


def test_a_batch_gathers_candidates_past_one_query_s_share_while_each_query_is_within_it(
    make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(score_bounds, "FIT_MIN_ROWS", 50)
    store = Store.open(make_settings(embedding_dimensions=DIM), EMBEDDER)
    base = clustered(400, 11)
    store.add(_rows(base, "global", "g"))
    cache = VectorCache(DIM, store.row_columns, scratch_dir=store.db_path)
    cache.reload(store.table)
    bounds = cache._bounds
    assert bounds.basis is not None
    queries = near_copies(base[::50], 12)
    threshold = 0.9
    own = candidates(bounds.snapshot(400) or [], bounds.basis, 400, queries, np.full(len(queries), threshold))
    union = len(np.unique(np.concatenate(own)))
    # Each query alone is within the per-query share; the batch together is past it.
    share = max(len(c) for c in own) / 400
    assert union > share * 400
    monkeypatch.setattr(exact_top, "MAX_CANDIDATE_SHARE", share)
    full_products: list[int] = []
    real_approximate = vector_cache.approximate

    def counting(*args: object, **kwargs: object) -> object:
        full_products.append(1)
        return real_approximate(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(vector_cache, "approximate", counting)
    asked = [Query(q, "global", 3, threshold) for q in queries]
    found = cache.search_many(asked, store.version())
    assert full_products == []  # gathered, not one full product for the batch
    exact = [store.lancedb_search(q, filters.eq("scope", "global"), 400) for q in queries]
    for answer, rows in zip(found, exact, strict=True):
        assert answer is not None
        assert [r["id"] for r in answer] == [r["id"] for r in rows if r["score"] >= threshold][:3]
    monkeypatch.setattr(exact_top, "MAX_UNION_SHARE", share)  # the batch cap alone sends it to one product
    assert cache.search_many(asked, store.version()) == found
    assert full_products == [1]
