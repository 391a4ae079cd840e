"""The restored index is mapped from its file: the kernel may drop those pages under memory pressure (they
are page cache, not the process's heap) and read them back on use, and recall stays exact."""

from __future__ import annotations

import ctypes
import mmap
from pathlib import Path

import pytest

from app.memory.store import saved_index
from tests.conftest import SettingsFactory
from tests.memory.store.test_cache_sync import _assert_mirrors_the_table, _rows
from tests.memory.store.test_saved_index import _index, _reopen, _saved_store


@pytest.fixture(autouse=True)
def _small_tables_are_saved(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(saved_index, "SAVE_MIN_ROWS", 0)


def _mappings(path: Path) -> list[tuple[int, int, int]]:
    """(start, end, resident kB) of each mapping of ``path`` in this process."""
    found: list[tuple[int, int, int]] = []
    current: list[int] | None = None
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if "-" in fields[0] and len(fields) >= 5 and ":" in fields[3]:  # a mapping's header line
            start, end = (int(a, 16) for a in fields[0].split("-"))
            current = [start, end, 0] if len(fields) >= 6 and fields[5] == str(path) else None
            if current is not None:
                found.append(current)  # type: ignore[arg-type]
        elif current is not None and fields[0] == "Rss:":
            current[2] = int(fields[1])
    return [(start, end, rss) for start, end, rss in found]


def _drop_pages(start: int, end: int) -> None:
    """What the kernel does to clean file pages under pressure: drop them (they are read back on use)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    assert libc.madvise(start, end - start, mmap.MADV_DONTNEED) == 0, ctypes.get_errno()


def test_the_mapped_index_pages_can_be_dropped_and_recall_stays_exact(make_settings: SettingsFactory) -> None:
    _, db_path = _saved_store(make_settings)
    store = _reopen(make_settings)
    assert store.sync is not None and store.sync.saved is not None and store.sync.saved.restores == 1
    _assert_mirrors_the_table(store, db_path)  # searches touch the mapped codes
    mapped = _mappings(_index(db_path).resolve())
    assert mapped and sum(rss for _, _, rss in mapped) > 0
    for start, end, _ in mapped:
        _drop_pages(start, end)
    assert sum(rss for _, _, rss in _mappings(_index(db_path).resolve())) == 0  # nothing of it resident
    _assert_mirrors_the_table(store, db_path)  # read back from the file: the same answers
    store.add(_rows(4, "agent:z", 31))  # and it still takes new rows beside the mapped ones
    _assert_mirrors_the_table(store, db_path)
