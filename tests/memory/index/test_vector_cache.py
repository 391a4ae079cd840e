"""The vector cache against a real LanceDB table: exact, scope-aware, batched, and never silently stale."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from app.memory.embeddings.hashing import HashEmbedder
from app.memory.index import block_matrix
from app.memory.index.row_file import RowFile
from app.memory.index.search_batch import SearchBatcher
from app.memory.index.vector_cache import VectorCache
from app.memory.rows import new_row
from app.memory.store import filters
from app.memory.store.table import Store
from tests.conftest import SettingsFactory
from tests.support.catch_up import caught_up

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


def test_a_matrix_in_many_small_blocks_grows_and_compacts_exactly(
    make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(block_matrix, "BLOCK_ROWS", 7)  # 100 rows span 15 blocks, every edge case crossed
    store = _store(make_settings)
    cache = _cache(store)
    added = _rows(30, "agent:x", 5)
    before = store.version()
    store.add(added)
    cache.apply_add(added, before, store.version())
    assert len(cache._matrix.codes.blocks) == -(-130 // 7)  # grown by whole blocks, never copied
    doomed = [r["id"] for r in store.scan(None, ["id"]).to_pylist()[:45]]
    for memory_id in doomed:  # more than a quarter dead: the cache compacts itself block by block
        before = store.version()
        store.delete(memory_id)
        cache.apply_delete([memory_id], before, store.version())
    assert cache._n < 130  # the dead rows were dropped
    for seed in (9, 10, 11):
        query = _rows(1, "global", seed)[0]["vector"]
        for scope in (None, "agent:x", "global"):
            found = cache.search(query, scope, 20, store.version())
            assert found is not None
            assert [r["id"] for r in found] == _exact_ids(store, query, scope, 20)
            where = filters.eq("scope", scope) if scope else None
            expected = [r["score"] for r in store.lancedb_search(query, where, 20)]
            assert np.allclose([r["score"] for r in found], expected, atol=1e-5)
    assert cache.reloads == 1


@pytest.mark.parametrize("cached", [True, False])
def test_a_search_for_the_id_alone_gives_the_same_hits_without_the_other_columns(
    make_settings: SettingsFactory, cached: bool
) -> None:
    store = Store.open(make_settings(embedding_dimensions=64, vector_cache=cached), EMBEDDER)
    rows = _rows(60, "global", 1)
    store.add(rows)
    assert (store.batcher is not None) == cached
    where = filters.eq("scope", "global")
    for row in rows[:5]:
        full = asyncio.run(store.vector_search_async(row["vector"], where, 3, min_score=0.0))
        slim = asyncio.run(store.vector_search_async(row["vector"], where, 3, min_score=0.0, columns=("id",)))
        assert [r["id"] for r in slim] == [r["id"] for r in full] and slim[0]["id"] == row["id"]
        assert np.allclose([r["score"] for r in slim], [r["score"] for r in full], atol=1e-6)
        assert all(set(r) == {"id", "score"} for r in slim) and "text" in full[0]


def test_block_matrix_grows_by_blocks_and_keeps_every_row() -> None:
    rng = np.random.default_rng(3)
    rows = rng.standard_normal((53, 16)).astype(np.float32)
    matrix = block_matrix.BlockMatrix(16, block_rows=8)
    matrix.put(0, rows[:20])
    matrix.put(20, rows[20:])
    assert np.array_equal(np.vstack(matrix.snapshot())[:53], rows)
    assert np.array_equal(matrix.row(37), rows[37])
    assert matrix.capacity == 56


@pytest.mark.parametrize("count", [1, 2, 3, 5, 8, 9, 16])
def test_rows_reaching_a_threshold_are_exactly_those_whose_product_reaches_it(count: int) -> None:
    # Small integers: every product is exact in float32, so ">= threshold" has one right answer.
    rng = np.random.default_rng(count)
    rows = rng.integers(-3, 4, (64, 16)).astype(np.float32)
    rows[61:] = 100.0  # past n: would reach any threshold if they were looked at
    matrix = block_matrix.BlockMatrix(16, block_rows=8)
    matrix.put(0, rows)
    queries = rng.integers(-3, 4, (count, 16)).astype(np.float32)
    thresholds = rng.integers(-2, 9, count).astype(np.float32)
    found = block_matrix.rows_reaching(matrix.snapshot(), 61, queries, thresholds)
    products = queries @ rows[:61].T
    assert [f.tolist() for f in found] == [np.flatnonzero(products[q] >= thresholds[q]).tolist()
                                           for q in range(count)]
    assert sum(map(len, found)) > 0


def test_rows_reaching_with_no_rows_or_no_queries_is_empty() -> None:
    matrix = block_matrix.BlockMatrix(4, block_rows=8)
    matrix.put(0, np.ones((5, 4), dtype=np.float32))
    none = block_matrix.rows_reaching(matrix.snapshot(), 0, np.ones((2, 4), dtype=np.float32), np.zeros(2))
    assert [len(f) for f in none] == [0, 0]
    assert block_matrix.rows_reaching(matrix.snapshot(), 5, np.ones((0, 4), dtype=np.float32), np.zeros(0)) == []


# --- wired into the store -------------------------------------------------------------------------

EXTERNAL = """
import sys, json, lancedb, numpy as np
from datetime import timedelta
table = lancedb.connect(sys.argv[1], read_consistency_interval=timedelta(0)).open_table("memories")
op = json.loads(sys.argv[2])
if op["kind"] == "add":
    row = dict(op["row"], vector=np.asarray(op["row"]["vector"], dtype=np.float32))
    table.add([row])
elif op["kind"] == "update":
    table.update(where=f"id = '{op['id']}'", values=op["values"])
else:
    table.delete(f"id = '{op['id']}'")
"""


def _external(db_path: Path, op: dict[str, object]) -> None:
    """Another OS process writing with lancedb directly (no lock, no cache of ours)."""
    import json

    subprocess.run([sys.executable, "-c", EXTERNAL, str(db_path), json.dumps(op)], check=True, timeout=120)


def _exact_ids(store: Store, query: np.ndarray, scope: str | None, limit: int) -> list[str]:
    where = filters.eq("scope", scope) if scope else None
    return [r["id"] for r in store.lancedb_search(query, where, limit)]


def test_a_row_another_process_adds_is_found_by_search_once_the_background_catch_up_ran(
        make_settings: SettingsFactory) -> None:
    settings = make_settings(embedding_dimensions=64)
    store = _store(make_settings)
    assert store.cache is not None and store.cache.reloads == 1
    [row] = _rows(1, "agent:x", 11)
    external = {**row, "vector": np.asarray(row["vector"]).tolist()}
    _external(settings.db_path, {"kind": "add", "row": external})
    assert caught_up(store)  # a search never waits for it: it starts the catch-up in the background
    for scope in (None, "agent:x"):
        where = filters.eq("scope", scope) if scope else None
        [hit] = store.vector_search(row["vector"], where, 1)
        assert hit["id"] == row["id"] and hit["score"] > 0.999 and hit["text"] == row["text"]


def test_another_process_update_and_delete_are_reflected_once_caught_up(make_settings: SettingsFactory) -> None:
    settings = make_settings(embedding_dimensions=64)
    store = _store(make_settings)
    query = _rows(1, "global", 12)[0]["vector"]
    [first, second] = store.vector_search(query, None, 2)
    _external(settings.db_path, {"kind": "update", "id": first["id"], "values": {"scope": "agent:y"}})
    assert caught_up(store)
    [moved] = store.vector_search(query, filters.eq("scope", "agent:y"), 5)
    assert moved["id"] == first["id"]
    assert first["id"] not in [r["id"] for r in store.vector_search(query, filters.eq("scope", "global"), 100)]
    _external(settings.db_path, {"kind": "delete", "id": first["id"]})
    assert caught_up(store)
    found = [r["id"] for r in store.vector_search(query, None, 5)]
    assert first["id"] not in found and found[0] == second["id"]
    assert found == _exact_ids(store, query, None, 5)


def test_appends_land_on_top_of_every_other_commit_without_a_conflict(make_settings: SettingsFactory) -> None:
    """Our appends go through a handle without read consistency; whatever committed since (another
    process, or our own update/delete/merge through the main handle) must be under them, not lost."""
    settings = make_settings(embedding_dimensions=64)
    store = _store(make_settings)
    [theirs] = _rows(1, "agent:x", 21)
    _external(settings.db_path, {"kind": "add", "row": {**theirs, "vector": np.asarray(theirs["vector"]).tolist()}})
    after_theirs = store.version()
    mine = _rows(2, "global", 22)
    store.add(mine[:1])
    assert store.version() == after_theirs + 1  # appended on top: no conflict, no retry
    store.update(str(mine[0]["id"]), {"text": "edited through the main handle"})
    store.delete(str(theirs["id"]))
    store.merge_tail(2)
    store.add(mine[1:])
    ids = set(store.table.to_arrow()["id"].to_pylist())
    assert str(mine[0]["id"]) in ids and str(mine[1]["id"]) in ids and str(theirs["id"]) not in ids
    assert len(ids) == 102 and store.count() == 102
    [edited] = store.get_rows([str(mine[0]["id"])])
    assert edited["text"] == "edited through the main handle"
    for row in mine:
        [hit] = store.vector_search(row["vector"], None, 1)
        assert hit["id"] == row["id"] and hit["score"] > 0.999
    assert [r["id"] for r in store.vector_search(mine[1]["vector"], None, 5)] == _exact_ids(
        store, np.asarray(mine[1]["vector"]), None, 5)


def test_our_own_writes_keep_the_cache_current_without_reloading(make_settings: SettingsFactory) -> None:
    store = _store(make_settings)
    assert store.cache is not None
    rows = _rows(5, "agent:z", 13)
    store.add(rows)
    store.update(str(rows[0]["id"]), {"scope": "global"})
    store.delete(str(rows[1]["id"]))
    store.optimize()
    for scope in (None, "agent:z", "global"):
        where = filters.eq("scope", scope) if scope else None
        for row in rows:
            found = [r["id"] for r in store.vector_search(row["vector"], where, 10)]
            assert found == _exact_ids(store, row["vector"], scope, 10)
    assert store.cache.reloads == 1 and store.cache.is_current(store.version())


def test_a_version_read_just_before_our_commit_landed_does_not_reload_the_cache(make_settings: SettingsFactory) -> None:
    store = _store(make_settings)
    assert store.cache is not None
    read_before = store.version()  # the search thread read this; then our commit landed
    added = _rows(1, "global", 14)
    store.add(added)
    refreshes: list[int] = []
    batcher = SearchBatcher(store.cache, lambda: read_before, lambda: refreshes.append(1))
    found = batcher.search(np.asarray(added[0]["vector"]), None, 1)
    assert found is not None and found[0]["id"] == added[0]["id"]  # answered, with our commit in it
    assert refreshes == [] and store.cache.reloads == 1
    assert not store.cache.is_current(store.version() + 1)  # a newer version (another writer's) is not


def test_scope_filtered_cache_search_equals_lancedb_exactly(make_settings: SettingsFactory) -> None:
    store = _store(make_settings)
    for seed in range(20, 30):
        query = _rows(1, "global", seed)[0]["vector"]
        for scope in ("global", "agent:x", "agent:nobody"):
            found = store.vector_search(query, filters.eq("scope", scope), 7)
            expected = store.lancedb_search(query, filters.eq("scope", scope), 7)
            assert [r["id"] for r in found] == [r["id"] for r in expected]
            assert np.allclose([r["score"] for r in found], [r["score"] for r in expected], atol=1e-5)
            assert all(r["scope"] == scope for r in found)


def test_a_filter_the_cache_cannot_answer_goes_to_lancedb(make_settings: SettingsFactory) -> None:
    store = _store(make_settings)
    assert store.batcher is not None
    query = _rows(1, "global", 31)[0]["vector"]
    where = filters.all_of(filters.eq("scope", "global"), filters.has_tag("t"))
    assert store.vector_search(query, where, 5) == store.lancedb_search(query, where, 5)
    assert store.batcher.searches == 0


def test_with_the_cache_disabled_the_store_searches_lancedb(make_settings: SettingsFactory) -> None:
    settings = make_settings(embedding_dimensions=64, vector_cache=False)
    store = Store.open(settings, EMBEDDER)
    assert store.cache is None and store.batcher is None
    rows = _rows(30, "agent:x", 32)
    store.add(rows)
    store.update(str(rows[0]["id"]), {"scope": "global"})
    store.delete(str(rows[1]["id"]))
    [hit] = store.vector_search(rows[0]["vector"], filters.eq("scope", "global"), 1)
    assert hit["id"] == rows[0]["id"]
    assert rows[1]["id"] not in [r["id"] for r in store.vector_search(rows[1]["vector"], None, 30)]


def test_searches_queued_together_are_answered_by_one_product_exactly_as_one_by_one(
        make_settings: SettingsFactory) -> None:
    store = _store(make_settings)
    assert store.cache is not None
    gate, entered = threading.Event(), threading.Event()

    def held_version() -> int:  # the first batch waits, so the next searches pile up behind it
        entered.set()
        gate.wait(30)
        return store.version()

    batcher = SearchBatcher(store.cache, held_version, store.refresh_cache)
    queries = [(_rows(1, "global", 40 + i)[0]["vector"], ("agent:x" if i % 3 == 0 else None), 3 + i % 5)
               for i in range(21)]
    first = batcher.submit(*queries[0])
    assert entered.wait(30)
    rest = [batcher.submit(*q) for q in queries[1:]]
    gate.set()
    answers = [first.result(30), *(f.result(30) for f in rest)]
    assert batcher.batches == 2 and batcher.largest_batch == 20
    version = store.version()
    for (vector, scope, limit), answer in zip(queries, answers, strict=True):
        alone = store.cache.search(vector, scope, limit, version)
        assert answer is not None and alone is not None
        assert [r["id"] for r in answer] == [r["id"] for r in alone] == _exact_ids(store, vector, scope, limit)
        assert np.allclose([r["score"] for r in answer], [r["score"] for r in alone], atol=1e-5)


def test_concurrent_store_searches_from_many_threads_are_all_exact(make_settings: SettingsFactory) -> None:
    store = _store(make_settings)
    queries = [_rows(1, "global", 60 + i)[0]["vector"] for i in range(24)]
    results: dict[int, list[str]] = {}

    def search(i: int) -> None:
        results[i] = [r["id"] for r in store.vector_search(queries[i], None, 5)]

    threads = [threading.Thread(target=search, args=(i,)) for i in range(len(queries))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert all(results[i] == _exact_ids(store, q, None, 5) for i, q in enumerate(queries))


def test_a_search_whose_caller_gave_up_does_not_stop_the_batch_thread(make_settings: SettingsFactory) -> None:
    store = _store(make_settings)
    assert store.cache is not None
    gate, entered = threading.Event(), threading.Event()

    def held_version() -> int:
        entered.set()
        gate.wait(30)
        return store.version()

    batcher = SearchBatcher(store.cache, held_version, store.refresh_cache)
    query = _rows(1, "global", 70)[0]["vector"]
    first = batcher.submit(query, None, 3)
    assert entered.wait(30)
    abandoned = batcher.submit(query, None, 3)
    assert abandoned.cancel()
    kept = batcher.submit(query, "agent:x", 3)
    gate.set()
    assert first.result(30) is not None
    assert [r["id"] for r in kept.result(30) or []] == _exact_ids(store, query, "agent:x", 3)
    assert batcher.search(query, None, 3) == first.result(30)


def test_a_full_disk_leaves_the_cache_stale_not_the_commit_failed(
    make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(make_settings)
    cache = _cache(store)
    added = _rows(3, "agent:x", 12)
    before = store.version()
    store.add(added)

    def full(*_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(RowFile, "write", full)
    cache.apply_add(added, before, store.version())  # the table has the rows: no exception here
    assert cache.search(added[0]["vector"], None, 5, store.version()) is None  # callers use LanceDB
    monkeypatch.undo()
    cache.reload(store.table)
    found = cache.search(added[0]["vector"], None, 1, store.version())
    assert found is not None and found[0]["id"] == added[0]["id"]


def test_a_full_disk_during_compaction_leaves_the_cache_stale_until_it_reloads(
    make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(make_settings)
    cache = _cache(store)

    def full(*_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(RowFile, "write", full)
    for memory_id in [r["id"] for r in store.scan(None, ["id"]).to_pylist()[:40]]:  # past a quarter dead
        before = store.version()
        store.delete(memory_id)
        cache.apply_delete([memory_id], before, store.version())
    assert cache.version is None
    monkeypatch.undo()
    cache.reload(store.table)
    query = _rows(1, "global", 13)[0]["vector"]
    found = cache.search(query, None, 10, store.version())
    assert found is not None and [r["id"] for r in found] == _exact_ids(store, query, None, 10)
