"""app.memory.vector_cache against a real LanceDB table: exact, scope-aware, and never silently stale."""

from __future__ import annotations

import numpy as np

from app.memory import filters
from app.memory.embeddings.hashing import HashEmbedder
from app.memory.rows import new_row
from app.memory.store import Store
from app.memory.vector_cache import VectorCache
from tests.conftest import SettingsFactory

EMBEDDER = HashEmbedder(64)


def _rows(count: int, scope: str, seed: int) -> list[dict[str, object]]:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((count, 64)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return [new_row(f"memory {seed}-{i}", vectors[i], scope, ["t"], 0.7, None, EMBEDDER.model) for i in range(count)]


def _store(make_settings: SettingsFactory) -> Store:
    store = Store.open(make_settings(embedding_dimensions=64), EMBEDDER)
    store.add(_rows(60, "global", 1) + _rows(40, "agent:x", 2))
    return store


def _cache(store: Store) -> VectorCache:
    cache = VectorCache(64, store.row_columns)
    cache.reload(store.table)
    return cache


def test_cache_search_returns_what_lancedb_returns_for_a_scope(make_settings: SettingsFactory) -> None:
    store = _store(make_settings)
    cache = _cache(store)
    query = _rows(1, "global", 9)[0]["vector"]
    for scope in (None, "agent:x"):
        where = filters.eq("scope", scope) if scope else None
        expected = store.vector_search(query, where, 10)
        found = cache.search(query, scope, 10, store.version())
        assert found is not None
        assert [r["id"] for r in found] == [r["id"] for r in expected]
        assert np.allclose([r["score"] for r in found], [r["score"] for r in expected], atol=1e-5)
        assert all(r["scope"] == scope for r in found if scope)


def test_a_commit_the_cache_was_not_told_about_makes_it_refuse_to_answer(make_settings: SettingsFactory) -> None:
    store = _store(make_settings)
    cache = _cache(store)
    store.add(_rows(1, "global", 3))  # another writer's commit, as far as the cache knows
    assert cache.search(np.ones(64, dtype=np.float32) / 8, None, 5, store.version()) is None
    cache.reload(store.table)
    assert cache.search(np.ones(64, dtype=np.float32) / 8, None, 5, store.version()) is not None


def test_our_own_add_delete_and_scope_change_are_applied_without_a_reload(make_settings: SettingsFactory) -> None:
    store = _store(make_settings)
    cache = _cache(store)
    [row] = _rows(1, "global", 4)
    before = store.version()
    store.add([row])
    cache.apply_add([row], before, store.version())
    hit = cache.search(row["vector"], None, 1, store.version())
    assert hit is not None and hit[0]["id"] == row["id"] and hit[0]["score"] > 0.999

    before = store.version()
    store.update(str(row["id"]), {"scope": "agent:x"})
    cache.apply_update(str(row["id"]), {"scope": "agent:x"}, before, store.version())
    moved = cache.search(row["vector"], "agent:x", 1, store.version())
    assert moved is not None and moved[0]["id"] == row["id"] and moved[0]["score"] > 0.999  # vector kept
    assert all(r["id"] != row["id"] for r in cache.search(row["vector"], "global", 5, store.version()) or [])

    before = store.version()
    store.delete(str(row["id"]))
    cache.apply_delete([str(row["id"])], before, store.version())
    remaining = cache.search(row["vector"], None, 5, store.version())
    assert remaining is not None and all(r["id"] != row["id"] for r in remaining)
    assert cache.reloads == 1


def test_an_unknown_scope_finds_nothing_rather_than_everything(make_settings: SettingsFactory) -> None:
    store = _store(make_settings)
    cache = _cache(store)
    assert cache.search(np.ones(64, dtype=np.float32) / 8, "agent:nobody", 5, store.version()) == []
