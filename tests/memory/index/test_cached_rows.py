"""Rows by id, keyword search and the hybrid's keyword-only candidates come from the vector cache, never stale."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from app.memory import keyword
from app.memory.rows import new_row
from app.memory.store import filters
from app.memory.store.table import Store
from tests.conftest import SettingsFactory
from tests.memory.index.test_vector_cache import EMBEDDER, _external

TEXTS = [
    "the deploy script lives in ops/deploy.sh", "TASK-00042 blocks the release", "毫秒级的延迟必须用毫秒记录",
    "the release notes mention the deploy freeze", "coffee machine on floor three", "deploy on fridays is banned",
]


def _vector(seed: int) -> np.ndarray:
    vector = np.random.default_rng(seed).standard_normal(64).astype(np.float32)
    return vector / np.linalg.norm(vector)


def _rows(scope: str, offset: int) -> list[dict[str, Any]]:
    return [new_row(text, _vector(offset + i), scope, ["t"], 0.5, None, EMBEDDER.model) for i, text in enumerate(TEXTS)]


def _stores(make_settings: SettingsFactory) -> tuple[Store, Store]:
    """A store with the vector cache and one without, over the same table."""
    settings = make_settings(embedding_dimensions=64)
    cached = Store.open(settings, EMBEDDER)
    for scope, offset in (("global", 0), ("agent:x", 100)):
        cached.add(_rows(scope, offset))
    plain = Store.open(make_settings(embedding_dimensions=64, vector_cache=False, db_path=settings.db_path), EMBEDDER)
    assert cached.cache is not None and plain.cache is None
    return cached, plain


def _no_lancedb_scan(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("read from LanceDB although the cache was current")

    monkeypatch.setattr(store, "scan", refuse)
    monkeypatch.setattr(store, "_scan_rows", refuse)


@pytest.mark.parametrize("query", ["deploy", "release deploy", "TASK-00042", "毫秒", "毫秒延迟", "nothing-like-it"])
@pytest.mark.parametrize("scope", [None, "global", "agent:x", "agent:none"])
def test_keyword_ranks_from_the_cache_as_from_lancedb(
    make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch, query: str, scope: str | None,
) -> None:
    cached, plain = _stores(make_settings)
    where = filters.eq("scope", scope) if scope else None
    expected = keyword.rank(plain, query, where, 50)
    _no_lancedb_scan(cached, monkeypatch)
    assert keyword.rank(cached, query, where, 50) == expected
    if query == "deploy" and scope != "agent:none":
        assert len(expected) == (6 if scope is None else 3)


def test_a_filter_the_cache_cannot_answer_is_scanned_in_lancedb(make_settings: SettingsFactory) -> None:
    cached, _ = _stores(make_settings)
    where = filters.all_of(filters.eq("scope", "global"), filters.tag("t"))
    table = cached.scan_columns(where, ["id", "text"])
    assert sorted(table.column("text").to_pylist()) == sorted(TEXTS)


def _caught_up(store: Store) -> None:
    """A read never waits for another process's commit: it starts the background catch-up; wait for that."""
    store.read_at()
    assert store.sync is not None and store.sync.wait_idle(30)


def test_another_process_add_and_delete_are_seen_once_the_background_catch_up_ran(
        make_settings: SettingsFactory) -> None:
    cached, _ = _stores(make_settings)
    [row] = [new_row("a zebra crossing near the office", _vector(7), "global", [], 0.5, None, EMBEDDER.model)]
    _external(cached.db_path, {"kind": "add", "row": {**row, "vector": row["vector"].tolist()}})
    _caught_up(cached)
    assert [memory_id for memory_id, _ in keyword.rank(cached, "zebra", None, 10)] == [row["id"]]
    _external(cached.db_path, {"kind": "delete", "id": row["id"]})
    _caught_up(cached)
    assert keyword.rank(cached, "zebra", None, 10) == []


def test_rows_with_scores_from_the_cache_match_lancedb(
    make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch,
) -> None:
    cached, plain = _stores(make_settings)
    ids = [memory_id for memory_id, _ in keyword.rank(plain, "the", None, 50)]
    asked = [ids[2], "missing1", ids[0], ids[1]]
    query = _vector(99) * 3.0  # not unit length: the score is still the cosine
    expected = plain.rows_with_scores(asked, query)
    _no_lancedb_scan(cached, monkeypatch)
    got = cached.rows_with_scores(asked, query)
    assert [r["id"] for r in got] == [r["id"] for r in expected] == [ids[2], ids[0], ids[1]]
    for mine, theirs in zip(got, expected, strict=True):
        assert mine["score"] == pytest.approx(theirs["score"], abs=1e-6)
        assert {k: v for k, v in mine.items() if k != "score"} == {k: v for k, v in theirs.items() if k != "score"}


def test_a_deleted_row_has_no_score(make_settings: SettingsFactory) -> None:
    cached, _ = _stores(make_settings)
    [first, second] = [memory_id for memory_id, _ in keyword.rank(cached, "release", filters.eq("scope", "global"), 10)]
    cached.delete(first)
    assert [r["id"] for r in cached.rows_with_scores([first, second], _vector(1))] == [second]


def test_rows_by_id_come_from_the_cache_as_from_lancedb(
    make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch,
) -> None:
    cached, plain = _stores(make_settings)
    ids = [memory_id for memory_id, _ in keyword.rank(plain, "the", None, 50)][:5] + ["missing1"]
    expected = {row["id"]: row for row in plain.get_rows(ids)}
    only_ids = sorted(row["id"] for row in plain.get_rows(ids, ["id", "scope"]))
    _no_lancedb_scan(cached, monkeypatch)
    assert {row["id"]: row for row in cached.get_rows(ids)} == expected and len(expected) == 5
    assert sorted(row["id"] for row in cached.get_rows(ids, ["id", "scope"])) == only_ids
    assert all(set(row) == {"id", "scope"} for row in cached.get_rows(ids, ["id", "scope"]))


def test_a_row_another_process_updates_or_deletes_is_read_fresh_by_id_once_caught_up(
        make_settings: SettingsFactory) -> None:
    cached, _ = _stores(make_settings)
    [memory_id] = [m for m, _ in keyword.rank(cached, "coffee", filters.eq("scope", "global"), 10)]
    assert cached.get_rows([memory_id])[0]["text"] == TEXTS[4]
    _external(cached.db_path, {"kind": "update", "id": memory_id, "values": {"text": "tea machine"}})
    _caught_up(cached)
    assert cached.get_rows([memory_id])[0]["text"] == "tea machine"
    _external(cached.db_path, {"kind": "delete", "id": memory_id})
    _caught_up(cached)
    assert cached.get_rows([memory_id]) == []
