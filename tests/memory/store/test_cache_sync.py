"""Another process's commits reach the vector cache as changes, not reloads, and the cache stays exact."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import pytest

from app.memory.embeddings.hashing import HashEmbedder
from app.memory.index import VectorCache
from app.memory.rows import new_row
from app.memory.store import cache_sync, filters
from app.memory.store.table import Store
from tests.conftest import SettingsFactory

EMBEDDER = HashEmbedder(64)
REPO = Path(__file__).resolve().parents[3]


def _vectors(count: int, seed: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((count, 64)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _rows(count: int, scope: str, seed: int) -> list[dict[str, Any]]:
    vectors = _vectors(count, seed)
    return [new_row(f"memory {seed}-{i}", vectors[i], scope, ["t"], 0.5, None, EMBEDDER.model) for i in range(count)]


def _plain(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**row, "vector": np.asarray(row["vector"]).tolist()} for row in rows]


def _foreign(db_path: Path, *ops: dict[str, Any]) -> None:
    """``ops`` done by another OS process with LanceDB alone (``foreign_writer``)."""
    subprocess.run([sys.executable, "-m", "tests.memory.store.foreign_writer", str(db_path), json.dumps(list(ops))],
                   check=True, timeout=120, cwd=REPO)


def _store(make_settings: SettingsFactory) -> tuple[Store, Path]:
    settings = make_settings(embedding_dimensions=64)
    store = Store.open(settings, EMBEDDER)
    store.add(_rows(150, "global", 1))
    store.add(_rows(90, "agent:x", 2))
    store.optimize()  # one large fragment, as a table that lived a while has
    store.add(_rows(10, "global", 3))  # and a small one after it
    return store, settings.db_path


def _cache(store: Store) -> VectorCache:
    assert store.cache is not None and store.sync is not None
    return store.cache


def _assert_mirrors_the_table(store: Store, db_path: Path) -> None:
    """The cache at the table's version holds exactly a fresh LanceDB read: ids, row columns, vectors, and
    its searches equal an exact numpy search over the fresh read."""
    cache = _cache(store)
    version = store.version()
    assert cache.version == version
    fresh = lancedb.connect(str(db_path)).open_table("memories").to_arrow()
    live = cache.live(version)
    assert live is not None
    rows, vectors = live
    expected = {r["id"]: r for r in fresh.select(store.row_columns).to_pylist()}
    assert {r["id"]: r for r in rows.to_pylist()} == expected and rows.num_rows == len(expected)
    fresh_vectors = dict(zip(fresh["id"].to_pylist(), np.asarray(fresh["vector"].to_pylist(), dtype=np.float32),
                             strict=True))
    for memory_id, vector in zip(rows["id"].to_pylist(), vectors, strict=True):
        assert np.array_equal(vector, fresh_vectors[memory_id])
    ids = list(fresh_vectors)
    matrix = np.stack([fresh_vectors[i] for i in ids])
    scopes = np.array([expected[i]["scope"] for i in ids], dtype=object)
    for query in _vectors(4, 99):
        for scope in (None, "agent:x"):
            scores = np.where(scopes == scope, matrix @ query, -np.inf) if scope else matrix @ query
            best = [ids[j] for j in np.argsort(-scores)[:10] if np.isfinite(scores[j])]
            where = filters.eq("scope", scope) if scope else None
            found = store.vector_search(query, where, 10)
            assert [r["id"] for r in found] == best
            assert np.allclose([r["score"] for r in found], np.sort(scores[np.isfinite(scores)])[::-1][:10], atol=1e-5)


def _search_once(store: Store) -> None:
    """One search, which notices the foreign commit and starts a background thread that brings the cache up to
    date (the search does not wait for it); then wait for that thread."""
    store.vector_search(_vectors(1, 7)[0], None, 3)
    assert store.sync is not None and store.sync.wait_idle(60)


def _some_ids(store: Store, scope: str, count: int) -> list[str]:
    return [r["id"] for r in store.scan(filters.eq("scope", scope), ["id"]).to_pylist()[:count]]


def _ops(store: Store, kind: str) -> list[dict[str, Any]]:
    """One foreign change of each kind, on rows of both the large and the small fragment."""
    old, new = _some_ids(store, "global", 2)[0], _some_ids(store, "global", 160)[-1]
    where = filters.is_in("id", [old, new])
    vector = _vectors(1, 11)[0].tolist()
    rows = _plain(_rows(3, "agent:x", 12))
    return {
        "append": [{"kind": "add", "rows": rows}],
        "delete": [{"kind": "delete", "where": where}],
        "update_text_and_vector": [{"kind": "update", "where": filters.eq("id", old),
                                    "values": {"text": "rewritten elsewhere", "vector": vector}}],
        "update_importance": [{"kind": "update", "where": where, "values": {"importance": 0.95}}],
        "update_scope": [{"kind": "update", "where": filters.eq("id", new), "values": {"scope": "agent:x"}}],
        "merge_insert": [{"kind": "merge", "rows": [*rows[:2], {**rows[2], "id": old, "text": "merged"}]}],
        "merge_insert_importance_only": [{"kind": "merge", "rows": [{"id": old, "importance": 0.05},
                                                                     {"id": new, "importance": 0.06}]}],
        "several_at_once": [{"kind": "add", "rows": rows}, {"kind": "delete", "where": filters.eq("id", old)},
                            {"kind": "update", "where": filters.eq("id", new), "values": {"importance": 0.2}}],
    }[kind]


@pytest.mark.parametrize("kind", ["append", "delete", "update_text_and_vector", "update_importance", "update_scope",
                                  "merge_insert", "merge_insert_importance_only", "several_at_once"])
def test_a_foreign_change_is_read_into_the_cache_without_a_reload(make_settings: SettingsFactory, kind: str) -> None:
    store, db_path = _store(make_settings)
    cache = _cache(store)
    assert store.sync is not None and cache.reloads == 1
    version = store.version()
    _foreign(db_path, *_ops(store, kind))
    assert store.version() > version and not cache.is_current(store.version())
    _search_once(store)
    # Read as one change by the one background run the search started: no reload.
    assert cache.reloads == 1 and store.sync.catch_ups == 1 and store.sync.background_runs == 1
    assert store.sync.rows_read <= 4  # the rows the change wrote, not the table
    _assert_mirrors_the_table(store, db_path)


def test_a_foreign_compaction_moves_rows_without_reading_vectors(make_settings: SettingsFactory) -> None:
    store, db_path = _store(make_settings)
    store.delete(_some_ids(store, "global", 1)[0])  # a deletion the compaction will drop for good
    _foreign(db_path, {"kind": "optimize"})
    _search_once(store)
    assert store.sync is not None and store.sync.catch_ups == 1 and _cache(store).reloads == 1
    assert store.sync.rows_read == 0  # the compacted rows are matched by id
    _assert_mirrors_the_table(store, db_path)


def test_a_foreign_compaction_of_rows_changed_since_the_cache_read_them_reads_only_those_rows(
    make_settings: SettingsFactory,
) -> None:
    """The compaction's input: fragments the cache holds (one row deleted, one rewritten elsewhere) and the
    fragments appended since (the rewritten row, four new ones): those five are read where they were
    before the compaction; the rest of the output is the cache's rows, moved."""
    store, db_path = _store(make_settings)
    first = _some_ids(store, "global", 1)[0]
    _foreign(db_path, {"kind": "delete", "where": filters.eq("id", first)},
             {"kind": "update", "where": filters.eq("id", _some_ids(store, "agent:x", 1)[0]),
              "values": {"text": "changed, then compacted"}},
             {"kind": "add", "rows": _plain(_rows(4, "global", 13))}, {"kind": "optimize"})
    _search_once(store)
    assert store.sync is not None and store.sync.catch_ups == 1 and _cache(store).reloads == 1
    assert store.sync.rows_read == 5 < store.count()
    _assert_mirrors_the_table(store, db_path)


def test_a_column_another_writer_adds_changes_nothing_the_cache_reads(make_settings: SettingsFactory) -> None:
    store, db_path = _store(make_settings)
    _foreign(db_path, {"kind": "add_column", "name": "source", "expression": "scope"})
    _search_once(store)
    assert store.sync is not None and store.sync.catch_ups == 1 and store.sync.rows_read == 0
    assert _cache(store).reloads == 1
    _assert_mirrors_the_table(store, db_path)
    store.add(_rows(2, "global", 14))  # our own appends still land in the cache with the extra column
    _foreign(db_path, {"kind": "update", "where": filters.eq("id", _some_ids(store, "agent:x", 1)[0]),
                       "values": {"importance": 0.3}})
    _search_once(store)
    assert _cache(store).reloads == 1
    _assert_mirrors_the_table(store, db_path)


def test_our_commits_between_foreign_ones_are_neither_lost_nor_doubled(make_settings: SettingsFactory) -> None:
    store, db_path = _store(make_settings)
    mine = _rows(3, "agent:x", 15)
    _foreign(db_path, {"kind": "add", "rows": _plain(_rows(2, "global", 16))})
    store.add(mine[:1])  # our writer first takes the foreign commit in, then applies its own in place
    assert store.sync is not None and store.sync.catch_ups == 1 and _cache(store).version == store.version()
    store.update(str(mine[0]["id"]), {"text": "edited by us"})
    _foreign(db_path, {"kind": "update", "where": filters.eq("id", str(mine[0]["id"])), "values": {"importance": 0.9}})
    store.add(mine[1:])
    _search_once(store)
    cache = _cache(store)
    assert cache.reloads == 1 and cache.version == store.version()
    [row] = store.get_rows([str(mine[0]["id"])])
    assert row["text"] == "edited by us" and row["importance"] == pytest.approx(0.9)
    _assert_mirrors_the_table(store, db_path)
    store.delete(str(mine[1]["id"]))  # and once current, our own commits apply in place again
    assert cache.version == store.version() and cache.reloads == 1


def test_searches_answer_at_the_cached_version_while_the_background_reads_a_foreign_change(
    make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, db_path = _store(make_settings)
    cache = _cache(store)
    query = _vectors(1, 18)[0]
    before = [r["id"] for r in store.vector_search(query, None, 5)]
    entered, gate = threading.Event(), threading.Event()
    apply_changes = cache.apply_changes

    def held_apply(*args: Any, **kwargs: Any) -> bool:
        entered.set()
        assert gate.wait(60)
        return apply_changes(*args, **kwargs)

    monkeypatch.setattr(cache, "apply_changes", held_apply)
    added = _rows(5, "agent:x", 17)
    for row in added:  # each one closer to the query than anything in the table
        row["vector"] = (query + 0.01 * row["vector"]) / np.linalg.norm(query + 0.01 * row["vector"])
    _foreign(db_path, {"kind": "add", "rows": _plain(added)})
    first = [r["id"] for r in store.vector_search(query, None, 5)]  # starts the catch-up, does not wait for it
    assert entered.wait(60)
    second = [r["id"] for r in store.vector_search(query, None, 5)]  # the catch-up is still held
    assert first == second == before  # the version the cache holds, consistently
    gate.set()
    assert store.sync is not None and store.sync.wait_idle(60)
    assert store.sync.background_runs == 1 and cache.reloads == 1 and store.sync.rows_read == 5
    assert sorted(r["id"] for r in store.vector_search(query, None, 5)) == sorted(str(row["id"]) for row in added)
    _assert_mirrors_the_table(store, db_path)


def test_a_foreign_change_too_large_for_our_writer_to_read_inline_is_caught_up_in_the_background(
    make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cache_sync, "INLINE_MAX_ROWS", 2)
    store, db_path = _store(make_settings)
    _foreign(db_path, {"kind": "add", "rows": _plain(_rows(5, "agent:x", 17))})
    mine = _rows(1, "global", 30)
    store.add(mine)  # under the lock the writer reads at most 2 rows inline: it leaves the 5 to the background
    assert store.sync is not None and store.sync.wait_idle(60)
    assert store.sync.background_runs == 1 and _cache(store).reloads == 1
    assert store.sync.rows_read in (5, 6)  # the foreign rows, and ours if it landed before they were read
    assert _cache(store).version == store.version()
    _assert_mirrors_the_table(store, db_path)


def test_a_column_changing_type_reloads_in_the_background_while_searches_use_lancedb(
    make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, db_path = _store(make_settings)
    cache = _cache(store)
    entered, gate = threading.Event(), threading.Event()
    load = cache.load

    def held_load(*args: Any, **kwargs: Any) -> bool:
        entered.set()
        assert gate.wait(60)
        return load(*args, **kwargs)

    monkeypatch.setattr(cache, "load", held_load)
    _foreign(db_path, {"kind": "alter_type", "name": "importance"})
    query = _vectors(1, 19)[0]
    first = store.vector_search(query, None, 5)  # starts the reload and does not wait for it
    assert entered.wait(60)
    scoped = filters.eq("scope", "agent:x")
    second = store.vector_search(query, scoped, 5)  # the reload is still held
    assert [r["id"] for r in first] == [r["id"] for r in store.lancedb_search(query, None, 5)]
    assert [r["id"] for r in second] == [r["id"] for r in store.lancedb_search(query, scoped, 5)]
    assert not cache.is_current(store.version())
    gate.set()
    assert store.sync is not None and store.sync.wait_idle(60)
    assert cache.reloads == 2
    _assert_mirrors_the_table(store, db_path)


def test_deletions_are_found_from_row_addresses_when_the_deletion_file_cannot_be_read_directly(
    make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cache_sync, "_deleted", lambda root, fragment: None)  # as for a bitmap, or object storage
    store, db_path = _store(make_settings)
    _foreign(db_path, *_ops(store, "several_at_once"), {"kind": "delete", "where": "scope = 'agent:x'"})
    _search_once(store)
    assert store.sync is not None and store.sync.catch_ups == 1 and _cache(store).reloads == 1
    _assert_mirrors_the_table(store, db_path)


def test_our_compaction_right_after_a_foreign_commit_keeps_the_cache_without_reading_rows(
    make_settings: SettingsFactory,
) -> None:
    store, db_path = _store(make_settings)
    _foreign(db_path, {"kind": "delete", "where": filters.eq("id", _some_ids(store, "global", 1)[0])},
             {"kind": "add", "rows": _plain(_rows(2, "agent:x", 20))})
    store.optimize()  # rewrites every fragment, the foreign ones included
    cache = _cache(store)
    assert store.sync is not None and store.sync.catch_ups == 1 and store.sync.rows_read == 2
    assert cache.version == store.version() and cache.reloads == 1
    _assert_mirrors_the_table(store, db_path)
