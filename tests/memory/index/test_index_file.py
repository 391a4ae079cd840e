"""The vector cache written to one file and mapped back in: the same answers, and damage is detected."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from app.memory.index import VectorCache, cache_state, index_file
from app.memory.index.index_file import IndexFileError

DIMENSION = 32
COLUMNS = ["id", "text", "scope"]


def _cache(rows: int, version: int = 5) -> tuple[VectorCache, np.ndarray]:
    vectors = np.random.default_rng(rows).standard_normal((rows, DIMENSION)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    batch = pa.RecordBatch.from_pydict({
        "id": pa.array([f"m{i}" for i in range(rows)], pa.string()),
        "text": pa.array([f"text {i}" for i in range(rows)], pa.string()),
        "scope": pa.array([("global", "agent:a", None)[i % 3] for i in range(rows)], pa.string()),
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel(), pa.float32()), DIMENSION)})
    cache = VectorCache(DIMENSION, COLUMNS)
    cache.load(version, [batch] if rows else [], pa.schema([batch.schema.field(c) for c in COLUMNS]), rows)
    return cache, vectors


def _saved(tmp_path: Path, cache: VectorCache) -> Path:
    exported = cache.export()
    assert exported is not None
    path = tmp_path / "index" / "index.bin"
    index_file.write(path, exported[0], {"table": "t"})
    return path


def _restored(path: Path) -> VectorCache:
    cache = VectorCache(DIMENSION, COLUMNS)
    cache.install(index_file.read(path))
    return cache


@pytest.mark.parametrize("step", [cache_state.STEP_ROWS, 7])  # the ids taken in one step, or in many
@pytest.mark.parametrize("rows", [0, 1, 5_000])  # empty, one partial block, past the bounds' fitting size
def test_a_restored_cache_answers_as_the_saved_one(tmp_path: Path, rows: int, step: int,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache_state, "STEP_ROWS", step)
    cache, vectors = _cache(rows)
    cache.apply_delete(["m1"], 5, 6)
    cache.apply_update("m2", {"text": "changed"}, 6, 7)
    restored = _restored(_saved(tmp_path, cache))
    assert restored.version == 7 and len(restored) == len(cache)
    queries = vectors[:4] if rows else np.eye(1, DIMENSION, dtype=np.float32)
    for scope in (None, "agent:a", "nowhere"):
        asked = [(q, scope, 10) for q in queries]
        assert restored.search_many(asked, 7) == cache.search_many(asked, 7)
        assert restored.search_many([(q, scope, 3, 0.5) for q in queries], 7) == \
            cache.search_many([(q, scope, 3, 0.5) for q in queries], 7)
    assert restored.rows(["m1", "m2", "m3"], 7) == cache.rows(["m1", "m2", "m3"], 7)
    restored.apply_add([{"id": "later", "text": "t", "scope": "global", "vector": -queries[0]}], 7, 8)
    assert restored.rows(["later"], 8) == [{"id": "later", "text": "t", "scope": "global"}]


def test_a_restored_cache_takes_commits_without_touching_the_file(tmp_path: Path) -> None:
    cache, vectors = _cache(300)
    path = _saved(tmp_path, cache)
    before = path.read_bytes()
    restored = _restored(path)
    restored.apply_add([{"id": "new", "text": "n", "scope": "global", "vector": -vectors[0]}], 5, 6)
    restored.apply_update("m0", {"vector": vectors[1]}, 6, 7)
    for i in range(2, 120):  # past a quarter dead: the cache compacts, reading the saved rows back
        restored.apply_delete([f"m{i}"], 5 + i, 6 + i)
    version = restored.version
    assert version == 125
    top = restored.search(-vectors[0], None, 1, version)
    assert top is not None and top[0]["id"] == "new" and top[0]["score"] == pytest.approx(1.0, abs=1e-5)
    again = restored.search(vectors[1], None, 2, version)
    assert again is not None and {r["id"] for r in again} == {"m0", "m1"}
    assert len(restored) == 300 + 1 - 118
    assert path.read_bytes() == before


@pytest.mark.parametrize("step", [cache_state.STEP_ROWS, 3])  # both copies in one step, or in two
def test_the_same_id_stored_twice_stays_twice(tmp_path: Path, step: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache_state, "STEP_ROWS", step)
    cache, vectors = _cache(10)
    batch = pa.table({"id": ["m3"], "text": ["copy"], "scope": ["global"],
                      "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors[3]), DIMENSION)})
    assert cache.apply_changes(5, 6, [], batch)
    restored = _restored(_saved(tmp_path, cache))
    found = restored.search(vectors[3], None, 2, 6)
    assert found is not None and [r["id"] for r in found] == ["m3", "m3"]
    assert len(restored) == 11


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x55
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("section", ["stats", "alive", "scope_codes", "bounds"])
def test_a_damaged_small_section_is_refused(tmp_path: Path, section: str) -> None:
    path = _saved(tmp_path, _cache(5_000)[0])
    where = index_file.read_header(path)["sections"][section]
    _flip(path, where["offset"] + where["length"] // 2)
    with pytest.raises(IndexFileError, match=section):
        index_file.read(path)


@pytest.mark.parametrize("section", ["codes", "rows", "exact"])
def test_a_damaged_large_section_fails_its_later_check(tmp_path: Path, section: str) -> None:
    path = _saved(tmp_path, _cache(2_000)[0])
    loaded = index_file.read(path)
    assert index_file.verify_large(loaded)
    loaded.close()
    where = index_file.read_header(path)["sections"][section]
    # In the row columns, a character of a text (the layout around it intact: only the checksum can tell).
    inside = path.read_bytes()[where["offset"] :].find(b"text 1000") + 5 if section == "rows" else 7
    _flip(path, where["offset"] + inside)
    loaded = index_file.read(path)
    assert not index_file.verify_large(loaded)
    loaded.close()


def test_a_truncated_or_foreign_file_is_refused(tmp_path: Path) -> None:
    path = _saved(tmp_path, _cache(100)[0])
    os.truncate(path, path.stat().st_size - 3)
    with pytest.raises(IndexFileError):
        index_file.read(path)
    path.write_bytes(b"not an index at all")
    with pytest.raises(IndexFileError):
        index_file.read(path)


def test_a_failed_write_leaves_the_old_file_whole(tmp_path: Path) -> None:
    cache, _ = _cache(100)
    path = _saved(tmp_path, cache)
    before = path.read_bytes()
    exported = cache.export()
    assert exported is not None

    def failing(_: np.ndarray) -> np.ndarray:
        raise OSError("disk full")

    exported[0].rows_at = failing
    with pytest.raises(OSError, match="disk full"):
        index_file.write(path, exported[0], {"table": "t"})
    assert path.read_bytes() == before
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_a_temporary_file_left_by_a_save_cut_short_is_removed_and_one_being_written_is_kept(tmp_path: Path) -> None:
    cache, _ = _cache(50)
    path = _saved(tmp_path, cache)
    cut_short, busy = path.parent / f".{path.name}.old.tmp", path.parent / f".{path.name}.busy.tmp"
    cut_short.write_bytes(b"x")  # its writer was killed: nobody holds it
    with busy.open("wb") as writing:  # another process's save in progress holds its file
        index_file.hold_while_writing(writing)
        assert index_file.remove_stale_temps(path.parent) == [cut_short]
        assert not cut_short.exists() and busy.exists()
    assert index_file.remove_stale_temps(path.parent) == [busy]  # its writer died: no one holds it now


def test_row_columns_whose_offsets_are_damaged_are_refused_at_once(tmp_path: Path) -> None:
    """The row columns are read before their checksum is checked: a damaged buffer layout must not be read
    out of bounds meanwhile (full validation), so it is refused like a small section."""
    path = _saved(tmp_path, _cache(5_000)[0])
    where = index_file.read_header(path)["sections"]["rows"]
    data = bytearray(path.read_bytes())
    start = where["offset"]
    # The id column's offsets follow the IPC metadata: make every offset in a stretch of it point far away.
    stretch = data[start : start + where["length"]]
    ids = stretch.find(b"m0")  # the first id's characters; its offsets lie just before the character data
    assert ids > 64
    data[start + ids - 64 : start + ids - 8] = b"\xff" * 56
    path.write_bytes(bytes(data))
    with pytest.raises(IndexFileError, match="row columns"):
        index_file.read(path)
