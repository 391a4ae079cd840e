"""A model's lookup table served from a verified file mapping (``mapped_table``)."""

from __future__ import annotations

import logging
import mmap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from app.memory.embeddings import mapped_table


def _table(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(3_000, 512), dtype=np.uint8)


def _mapping_of(array: np.ndarray) -> object:
    base: object = array
    while isinstance(base, np.ndarray):
        base = base.base
    return base.obj if isinstance(base, memoryview) else base  # frombuffer keeps a memoryview of it


def test_the_table_comes_back_equal_read_only_and_backed_by_its_file(tmp_path: Path) -> None:
    table = _table()
    mapped = mapped_table.map_table(table, tmp_path, "t")
    assert mapped is not table and np.array_equal(mapped, table)
    assert mapped.dtype == table.dtype and mapped.shape == table.shape
    assert not mapped.flags.writeable
    assert isinstance(_mapping_of(mapped), mmap.mmap)
    [path] = tmp_path.iterdir()
    assert path.name == mapped_table.file_name("t", table) and path.read_bytes() == table.tobytes()


def test_a_file_that_already_holds_the_table_is_reused_not_rewritten(tmp_path: Path) -> None:
    table = _table()
    mapped_table.map_table(table, tmp_path, "t")
    [path] = tmp_path.iterdir()
    before = path.stat()
    again = mapped_table.map_table(table, tmp_path, "t")
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert np.array_equal(again, table)


@pytest.mark.parametrize("damage", ["flip", "truncate", "extend"])
def test_a_damaged_file_is_rewritten_so_the_mapping_always_holds_the_models_own_table(
    tmp_path: Path, damage: str
) -> None:
    table = _table()
    mapped_table.map_table(table, tmp_path, "t")
    [path] = tmp_path.iterdir()
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0xFF
    elif damage == "truncate":
        del data[-1]
    else:
        data += b"\0"
    path.write_bytes(bytes(data))
    mapped = mapped_table.map_table(table, tmp_path, "t")
    assert np.array_equal(mapped, table)
    assert path.read_bytes() == table.tobytes()
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left behind


def test_another_table_gets_a_file_of_its_own(tmp_path: Path) -> None:
    first, second = _table(1), _table(2)
    assert mapped_table.file_name("t", first) != mapped_table.file_name("t", second)
    assert mapped_table.file_name("t", first) != mapped_table.file_name("t", first.reshape(1_500, 1_024))
    assert np.array_equal(mapped_table.map_table(first, tmp_path, "t"), first)
    assert np.array_equal(mapped_table.map_table(second, tmp_path, "t"), second)
    assert len(list(tmp_path.iterdir())) == 2


def test_a_directory_that_cannot_be_written_keeps_the_table_in_memory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the directory should be")
    table = _table()
    with caplog.at_level(logging.WARNING, logger=mapped_table.__name__):
        result = mapped_table.map_table(table, blocker, "t")
    assert result is table
    assert "keeping the model's t table in memory" in caplog.text


def test_an_empty_table_is_left_as_it_is(tmp_path: Path) -> None:
    empty = np.empty((0, 512), dtype=np.uint8)
    assert mapped_table.map_table(empty, tmp_path, "t") is empty
    assert list(tmp_path.iterdir()) == []


def test_loaders_racing_on_a_fresh_directory_all_map_the_same_right_bytes(tmp_path: Path) -> None:
    table = _table()
    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(lambda _: mapped_table.map_table(table, tmp_path, "t"), range(6)))
    assert all(np.array_equal(result, table) for result in results)
    assert all(isinstance(_mapping_of(result), mmap.mmap) for result in results)
    assert [p.name for p in tmp_path.iterdir()] == [mapped_table.file_name("t", table)]  # temporaries gone
