"""Changes read off the table reach the cache only from the version they start at; our own commit in
flight is the one version ahead the cache may answer for."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from app.memory.index import VectorCache

COLUMNS = ["id", "text", "scope"]


def _table(ids: list[str], seed: int) -> pa.Table:
    vectors = np.random.default_rng(seed).standard_normal((len(ids), 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return pa.table({"id": ids, "text": [f"text of {i}" for i in ids], "scope": ["global"] * len(ids),
                     "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), 8)})


def _cache(ids: list[str], version: int) -> VectorCache:
    cache = VectorCache(8, COLUMNS)
    table = _table(ids, 1)
    assert cache.load(version, table.to_batches(), table.select(COLUMNS).schema, table.num_rows)
    return cache


def _ids(cache: VectorCache, version: int) -> list[str]:
    live = cache.live(version)
    assert live is not None
    rows: list[Any] = live[0]["id"].to_pylist()
    return sorted(rows)


def test_changes_from_a_version_the_cache_is_not_at_change_nothing() -> None:
    cache = _cache(["a", "b", "c"], 5)
    assert not cache.apply_changes(4, 6, {"a"}, _table(["d"], 2))
    assert cache.version == 5 and _ids(cache, 5) == ["a", "b", "c"]
    rewritten = _table(["d", "b"], 3)
    assert cache.apply_changes(5, 7, {"a", "b"}, rewritten)  # a rewritten row is gone from its fragment
    assert cache.version == 7 and _ids(cache, 7) == ["b", "c", "d"]
    assert cache.rows(["b"], 7) == [{"id": "b", "text": "text of b", "scope": "global"}]
    hit = cache.search(np.asarray(rewritten["vector"][1].as_py(), dtype=np.float32), None, 1, 7)
    assert hit is not None and hit[0]["id"] == "b" and hit[0]["score"] > 0.999  # the rewritten copy's vector


def test_changes_of_many_rows_go_in_a_batch_at_a_time_and_end_current(monkeypatch: Any) -> None:
    from app.memory.index import vector_cache

    monkeypatch.setattr(vector_cache, "RELOAD_BATCH_ROWS", 2)
    cache = _cache(["a", "b"], 1)
    assert cache.apply_changes(1, 2, set(), _table(["c", "d", "e", "f", "g"], 4))
    assert cache.version == 2 and _ids(cache, 2) == ["a", "b", "c", "d", "e", "f", "g"]


def test_our_commit_in_flight_from_the_cache_version_is_the_only_version_ahead_it_answers_for() -> None:
    cache = _cache(["a"], 3)
    assert not cache.is_current(4)
    with cache.writing(3):
        assert cache.is_current(4) and not cache.is_current(5)
    with cache.writing(4):  # a commit on top of another writer's: the cache is behind both
        assert not cache.is_current(4) and not cache.is_current(5)
    cache.apply_add([{"id": "x", "text": "t", "scope": "global", "vector": np.ones(8)}], 4, 5)
    assert cache.version == 3 and _ids(cache, 3) == ["a"]  # left behind, not marked stale
