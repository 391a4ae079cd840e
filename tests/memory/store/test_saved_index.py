"""A restarted store restores its vector cache from the saved index, caught up with the commits since,
and never from a file that is not this table's as it is now."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import pytest

from app.memory.embeddings.hashing import HashEmbedder
from app.memory.index import index_delta, index_file
from app.memory.store import filters, saved_index
from app.memory.store.schema import build_schema
from app.memory.store.table import Store
from tests.conftest import SettingsFactory
from tests.memory.store.test_cache_sync import (
    EMBEDDER,
    _assert_mirrors_the_table,
    _foreign,
    _plain,
    _rows,
    _some_ids,
    _vectors,
)


@pytest.fixture(autouse=True)
def _small_tables_are_saved(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(saved_index, "SAVE_MIN_ROWS", 0)


def _saved_store(make_settings: SettingsFactory, **overrides: object) -> tuple[Store, Path]:
    """A store with rows in two fragments, closed (which saves its index)."""
    settings = make_settings(embedding_dimensions=64, **overrides)
    store = Store.open(settings, EMBEDDER)
    store.add(_rows(150, "global", 1))
    store.add(_rows(90, "agent:x", 2))
    store.delete(_some_ids(store, "global", 1)[0])
    assert store.sync is not None
    store.sync.close()
    assert store.sync.saved is not None and store.sync.saved.saves == 1
    return store, settings.db_path


def _reopen(make_settings: SettingsFactory, embedder: HashEmbedder = EMBEDDER, *, background: bool = False,
            **overrides: object) -> Store:
    store = Store.open(make_settings(embedding_dimensions=embedder.dimension, **overrides), embedder,
                       load_cache=not background)
    assert store.sync is not None and store.sync.saved is not None
    assert store.sync.wait_idle(60)
    return store


def _index(db_path: Path, table: str = "memories") -> Path:
    return db_path / saved_index.INDEX_DIR / table / saved_index.FILE_NAME


def _recreate(db_path: Path, rows: int, seed: int, dimension: int = 64) -> None:
    """Another program drops the table and creates it again, with other rows, past the saved version."""
    db = lancedb.connect(str(db_path))
    db.drop_table("memories")
    embedder = HashEmbedder(dimension)
    table = db.create_table("memories", schema=build_schema(embedder))
    vectors = np.random.default_rng(seed).standard_normal((rows, dimension)).astype(np.float32)
    from app.memory.rows import new_row
    from app.memory.store import commits

    for i in range(0, rows, 10):  # many commits: the new table's version passes the saved one
        batch = [new_row(f"new {seed}-{j}", vectors[j] / np.linalg.norm(vectors[j]), "global", [], 0.5, None,
                         embedder.model) for j in range(i, min(rows, i + 10))]
        table.add(commits.to_arrow(batch, table.schema))


def test_a_restarted_store_restores_the_saved_index_without_reading_the_table(make_settings: SettingsFactory) -> None:
    first, db_path = _saved_store(make_settings)
    assert _index(db_path).is_file()
    store = _reopen(make_settings)
    assert store.sync is not None and store.sync.saved is not None and store.cache is not None
    assert store.sync.saved.restores == 1
    assert store.cache.reloads == 0  # no load of the whole table
    assert store.sync.rows_read == 0
    assert len(store.cache) == len(first.cache or [])
    _assert_mirrors_the_table(store, db_path)


def test_a_store_loading_in_the_background_restores_the_saved_index(make_settings: SettingsFactory) -> None:
    _, db_path = _saved_store(make_settings)
    store = _reopen(make_settings, background=True)
    assert store.sync is not None and store.sync.saved is not None and store.cache is not None
    assert store.sync.saved.restores == 1 and store.cache.reloads == 0
    _assert_mirrors_the_table(store, db_path)


def test_commits_made_while_the_store_was_down_are_caught_up_from_the_saved_version(
        make_settings: SettingsFactory) -> None:
    first, db_path = _saved_store(make_settings)
    old = _some_ids(first, "global", 3)
    _foreign(db_path,
             {"kind": "add", "rows": _plain(_rows(7, "agent:y", 5))},
             {"kind": "delete", "where": filters.eq("id", old[0])},
             {"kind": "update", "where": filters.eq("id", old[1]),
              "values": {"text": "rewritten while down", "vector": _vectors(1, 6)[0].tolist()}})
    store = _reopen(make_settings)
    assert store.sync is not None and store.sync.saved is not None and store.cache is not None
    assert store.sync.saved.restores == 1 and store.cache.reloads == 0
    assert store.sync.catch_ups >= 1 and 0 < store.sync.rows_read < 20  # the change only, not the table
    _assert_mirrors_the_table(store, db_path)
    assert old[0] not in {r["id"] for r in store.get_rows(old)}


def test_the_index_of_a_table_dropped_and_created_again_is_rejected(make_settings: SettingsFactory) -> None:
    first, db_path = _saved_store(make_settings)
    old_ids = set(_some_ids(first, "global", 200))
    assert first.version() < 30
    _recreate(db_path, 300, seed=8)
    store = _reopen(make_settings)
    assert store.sync is not None and store.sync.saved is not None and store.cache is not None
    assert store.sync.saved.restores == 0 and store.cache.reloads == 1
    assert "not this table's" in store.sync.saved.rejected
    _assert_mirrors_the_table(store, db_path)
    found = store.vector_search(_vectors(1, 3)[0], None, 50)
    assert found and not old_ids & {r["id"] for r in found}


def test_the_index_of_another_dimension_is_rejected(make_settings: SettingsFactory) -> None:
    _, db_path = _saved_store(make_settings)
    _recreate(db_path, 300, seed=9, dimension=32)
    store = _reopen(make_settings, HashEmbedder(32))
    assert store.sync is not None and store.sync.saved is not None and store.cache is not None
    assert store.sync.saved.restores == 0 and store.cache.reloads == 1 and store.cache.dimension == 32
    assert store.sync.saved.rejected
    assert len(store.vector_search(np.ones(32, dtype=np.float32) / np.sqrt(32), None, 5)) == 5


def test_another_tables_index_never_answers(make_settings: SettingsFactory) -> None:
    _, db_path = _saved_store(make_settings)
    other = Store.open(make_settings(embedding_dimensions=64, table="other"), EMBEDDER)
    other.add(_rows(40, "global", 21))
    other_ids = {r["id"] for r in other.scan(None, ["id"]).to_pylist()}
    _index(db_path, "other").parent.mkdir(parents=True)
    os.replace(_index(db_path), _index(db_path, "other"))  # the first table's file in the other's place
    store = _reopen(make_settings, table="other")
    assert store.sync is not None and store.sync.saved is not None and store.cache is not None
    assert store.sync.saved.restores == 0 and store.cache.reloads == 1
    found = store.vector_search(_vectors(1, 3)[0], None, 100)
    assert {r["id"] for r in found} == other_ids


def _flip_byte(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))


def test_a_file_with_a_corrupt_header_is_rejected_and_written_again(make_settings: SettingsFactory) -> None:
    _, db_path = _saved_store(make_settings)
    path = _index(db_path)
    _flip_byte(path, path.stat().st_size - 40)  # inside the header
    store = _reopen(make_settings)
    assert store.sync is not None and store.sync.saved is not None and store.cache is not None
    assert store.sync.saved.restores == 0 and store.cache.reloads == 1
    assert "checksum" in store.sync.saved.rejected
    _assert_mirrors_the_table(store, db_path)
    store.sync.close()
    assert index_file.read_header(path)["version"] == store.version()


def test_a_file_with_corrupt_vectors_is_replaced_by_a_load_from_the_table(make_settings: SettingsFactory) -> None:
    _, db_path = _saved_store(make_settings)
    path = _index(db_path)
    exact = index_file.read_header(path)["sections"]["exact"]
    _flip_byte(path, exact["offset"] + exact["length"] // 2)
    store = _reopen(make_settings)
    assert store.sync is not None and store.sync.saved is not None and store.cache is not None
    assert store.sync.saved.restores == 1  # restored, then its vectors' checksum failed: loaded from the table
    assert store.cache.reloads == 1 and "checksum" in store.sync.saved.rejected
    _assert_mirrors_the_table(store, db_path)


def test_a_truncated_file_is_rejected(make_settings: SettingsFactory) -> None:
    _, db_path = _saved_store(make_settings)
    path = _index(db_path)
    os.truncate(path, path.stat().st_size // 2)
    store = _reopen(make_settings)
    assert store.sync is not None and store.sync.saved is not None and store.cache is not None
    assert store.sync.saved.restores == 0 and store.cache.reloads == 1
    _assert_mirrors_the_table(store, db_path)


def test_a_small_table_keeps_no_index(make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(saved_index, "SAVE_MIN_ROWS", 10_000)
    store = Store.open(make_settings(embedding_dimensions=64), EMBEDDER)
    store.add(_rows(20, "global", 1))
    assert store.sync is not None
    store.sync.close()
    assert not _index(make_settings().db_path).exists()


def test_a_search_during_the_restore_waits_for_it_instead_of_scanning_lancedb(
        make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    _, db_path = _saved_store(make_settings)
    entered, release = threading.Event(), threading.Event()
    restore = saved_index.SavedIndex.restore

    def held(self: saved_index.SavedIndex, *args: Any) -> Any:
        entered.set()
        release.wait(30)
        return restore(self, *args)

    monkeypatch.setattr(saved_index.SavedIndex, "restore", held)
    store = Store.open(make_settings(embedding_dimensions=64), EMBEDDER, load_cache=False)
    assert entered.wait(30) and store.batcher is not None
    scans: list[object] = []
    monkeypatch.setattr(store, "lancedb_search", lambda *args, **kwargs: scans.append(args) or [])
    found: list[list[dict[str, Any]]] = []
    search = threading.Thread(target=lambda: found.append(store.vector_search(_vectors(1, 4)[0], None, 5)))
    search.start()
    deadline = time.monotonic() + 30
    while store.batcher.batches == 0 and time.monotonic() < deadline:  # the search thread has it
        time.sleep(0.01)
    release.set()
    search.join(30)
    assert not scans and len(found[0]) == 5
    assert store.sync is not None and store.sync.saved is not None and store.sync.saved.restores == 1


def _delta(db_path: Path) -> Path:
    return index_delta.delta_path(_index(db_path))


def test_a_stop_after_writes_saves_only_a_delta_and_a_restart_restores_both(make_settings: SettingsFactory) -> None:
    first, db_path = _saved_store(make_settings)
    whole = _index(db_path).stat()
    store = _reopen(make_settings)
    old = _some_ids(store, "global", 2)
    store.add(_rows(12, "agent:z", 9))
    store.update(old[0], {"text": "changed after the save"})
    store.delete(old[1])
    assert store.sync is not None and store.sync.saved is not None
    store.sync.close()
    assert _index(db_path).stat().st_mtime_ns == whole.st_mtime_ns  # the whole file was not written again
    assert _delta(db_path).is_file() and _delta(db_path).stat().st_size < whole.st_size / 4
    restarted = _reopen(make_settings)
    assert restarted.sync is not None and restarted.sync.saved is not None and restarted.cache is not None
    assert restarted.sync.saved.restores == 1 and restarted.cache.reloads == 0
    assert restarted.sync.rows_read == 0  # at the table's version already: nothing read from it
    _assert_mirrors_the_table(restarted, db_path)


def test_a_stop_with_nothing_new_writes_nothing(make_settings: SettingsFactory) -> None:
    _, db_path = _saved_store(make_settings)
    whole = _index(db_path).stat().st_mtime_ns
    store = _reopen(make_settings)
    assert store.sync is not None and store.sync.saved is not None
    store.sync.close()
    assert store.sync.saved.saves == 0 and not _delta(db_path).exists()
    assert _index(db_path).stat().st_mtime_ns == whole


def test_a_delta_past_its_share_is_left_to_a_whole_save_which_replaces_both(make_settings: SettingsFactory) -> None:
    _, db_path = _saved_store(make_settings)
    store = _reopen(make_settings)
    store.add(_rows(int(240 * index_delta.MAX_SHARE) + 5, "agent:w", 11))  # more than a delta takes
    assert store.sync is not None and store.sync.saver is not None and store.sync.saved is not None
    assert store.sync.saver.save(delta_only=True) is False and not _delta(store.db_path).exists()  # type: ignore[arg-type]
    assert store.sync.saver.save() is True  # the saving thread's whole save
    assert not _delta(db_path).exists()
    store.add(_rows(3, "agent:w", 12))
    store.sync.close()  # a delta of the new whole file
    assert _delta(db_path).is_file()
    _assert_mirrors_the_table(_reopen(make_settings), db_path)


def test_a_corrupt_delta_is_dropped_and_the_file_caught_up_from_the_table(make_settings: SettingsFactory) -> None:
    _, db_path = _saved_store(make_settings)
    store = _reopen(make_settings)
    store.add(_rows(5, "agent:v", 13))
    assert store.sync is not None
    store.sync.close()
    with open(_delta(db_path), "rb") as file:
        where = index_file.header_of(file.fileno())["sections"]["exact"]
    raw = bytearray(_delta(db_path).read_bytes())
    raw[where["offset"] + where["length"] // 2] ^= 0xFF  # one vector byte: only its checksum can tell
    _delta(db_path).write_bytes(bytes(raw))
    restarted = _reopen(make_settings)
    assert restarted.sync is not None and restarted.sync.saved is not None and restarted.cache is not None
    assert restarted.sync.saved.restores == 1 and restarted.cache.reloads == 0 and not _delta(db_path).exists()
    assert 0 < restarted.sync.rows_read <= 5  # the rows the delta held, read from the table instead
    _assert_mirrors_the_table(restarted, db_path)


def test_a_cache_that_compacted_itself_saves_no_delta_at_the_stop(make_settings: SettingsFactory) -> None:
    _, db_path = _saved_store(make_settings)
    store = _reopen(make_settings)
    for memory_id in _some_ids(store, "global", 100):  # past the dead share: the cache compacts itself
        store.delete(memory_id)
    assert store.sync is not None and store.sync.saved is not None and store.cache is not None
    assert store.cache.export_delta() is None  # its positions no longer extend the file
    store.sync.close()
    assert not _delta(db_path).exists()
    _assert_mirrors_the_table(_reopen(make_settings), db_path)  # the old file, caught up


def test_a_compaction_of_fragments_that_lost_rows_while_down_is_followed_without_reading_them(
        make_settings: SettingsFactory) -> None:
    """Another program deletes rows and compacts while the server is down: the compacted fragments hold
    the saved rows less the deleted ones, so a restart marks those dead and reads no row (no reload)."""
    first, db_path = _saved_store(make_settings)
    doomed = _some_ids(first, "global", 40) + _some_ids(first, "agent:x", 20)
    _foreign(db_path, {"kind": "delete", "where": filters.is_in("id", doomed)}, {"kind": "optimize"})
    store = _reopen(make_settings)
    assert store.sync is not None and store.sync.saved is not None and store.cache is not None
    assert store.sync.saved.restores == 1 and store.cache.reloads == 0
    assert store.sync.catch_ups >= 1 and store.sync.rows_read == 0
    assert store.get_rows(doomed) == []
    _assert_mirrors_the_table(store, db_path)


def test_rows_added_and_deleted_then_compacted_while_down_are_read_and_dropped(make_settings: SettingsFactory) -> None:
    first, db_path = _saved_store(make_settings)
    doomed = _some_ids(first, "global", 30)
    _foreign(db_path, {"kind": "delete", "where": filters.is_in("id", doomed)},
             {"kind": "add", "rows": _plain(_rows(6, "agent:y", 9))}, {"kind": "optimize"})
    store = _reopen(make_settings)
    assert store.sync is not None and store.cache is not None and store.cache.reloads == 0
    assert 0 < store.sync.rows_read < 240  # the compacted fragments were read, not the whole table again
    _assert_mirrors_the_table(store, db_path)


def test_a_store_whose_cache_lags_never_overwrites_a_newer_saved_index(make_settings: SettingsFactory) -> None:
    """A command's store opened before a server saved a newer index must not replace it with its older one."""
    _, db_path = _saved_store(make_settings)
    lagging = _reopen(make_settings)
    lagging.add(_rows(3, "agent:u", 20))  # its cache moves past the file
    newer = _reopen(make_settings)
    newer.add(_rows(5, "agent:v", 21))
    assert newer.sync is not None and lagging.sync is not None and lagging.sync.saver is not None
    assert lagging.cache is not None and newer.cache is not None
    assert lagging.cache.version is not None and newer.cache.version is not None
    assert lagging.cache.version < newer.cache.version
    newer.sync.close()
    delta = index_delta.delta_path(_index(db_path))
    assert index_file.read_header(delta)["version"] == newer.cache.version
    lagging.sync.saver.save()  # its cache: the older version
    assert index_file.read_header(delta)["version"] == newer.cache.version
    assert index_file.read_header(_index(db_path))["version"] < newer.cache.version


def test_a_stop_never_writes_a_large_index_whole_and_gives_up_a_whole_save_under_way(
        make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Seconds of writing at a million rows are the saving thread's; the stop neither waits for them nor
    starts them (a supervisor kills a slow stop), and a save given up leaves nothing behind."""
    monkeypatch.setattr(saved_index, "STOP_WHOLE_SAVE_MAX_ROWS", 100)
    settings = make_settings(embedding_dimensions=64)
    store = Store.open(settings, EMBEDDER)
    store.add(_rows(150, "global", 1))
    assert store.sync is not None and store.sync.saved is not None and store.sync.saver is not None
    stopping = threading.Event()
    stopping.set()
    assert not store.sync.saved.save(store.sync.dataset, lambda: True, stop=stopping)  # given up at once
    store.sync.close()
    index = _index(settings.db_path)
    assert not index.exists() and list(index.parent.glob(".*.tmp")) == []
    assert store.sync.saved.saves == 0
    small = _reopen(make_settings)  # the next start loads the table, and its saving thread writes the file
    assert small.sync is not None and small.sync.saver is not None
    assert small.sync.saver.due and small.sync.saver.save()
    assert index.is_file()
