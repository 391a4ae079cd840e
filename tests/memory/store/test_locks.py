"""The write lock in memory-lancedb-pro's terms: proper-lockfile on the target file ``.memory-write.lock``."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from app.memory.errors import StoreBusy
from app.memory.store.locks import LOCK_DIR_NAME, LOCK_TARGET_NAME, STALE_S, FileLease, WriteLock


def _age(path: Path, seconds: float) -> None:
    old = time.time() - seconds
    os.utime(path, (old, old))


def test_the_lock_is_the_directory_beside_a_lock_file_that_persists(tmp_path: Path) -> None:
    with WriteLock(tmp_path, timeout_s=5).hold():
        assert (tmp_path / LOCK_DIR_NAME).is_dir()
        assert stat.S_ISREG(os.lstat(tmp_path / LOCK_TARGET_NAME).st_mode)
    assert not (tmp_path / LOCK_DIR_NAME).exists()
    target = tmp_path / LOCK_TARGET_NAME
    assert target.is_file() and target.stat().st_size == 0


def test_a_lock_file_left_by_the_plugin_does_not_block_writes(tmp_path: Path) -> None:
    (tmp_path / LOCK_TARGET_NAME).write_bytes(b"")  # what memory-lancedb-pro leaves after its first write
    _age(tmp_path / LOCK_TARGET_NAME, 3600)
    started = time.monotonic()
    for _ in range(3):
        with WriteLock(tmp_path, timeout_s=2).hold():
            pass
    assert time.monotonic() - started < 2  # never waited for the timeout


def test_a_live_plugin_lock_makes_the_writer_wait_then_report_busy(tmp_path: Path) -> None:
    os.mkdir(tmp_path / LOCK_DIR_NAME)
    with pytest.raises(StoreBusy, match="memory-lancedb-pro"), WriteLock(tmp_path, timeout_s=0.3).hold():
        pass
    assert (tmp_path / LOCK_DIR_NAME).is_dir()  # a live lock is never removed


def test_a_stale_earlier_version_lock_directory_becomes_the_lock_file(tmp_path: Path) -> None:
    legacy = tmp_path / LOCK_TARGET_NAME
    legacy.mkdir()
    _age(legacy, STALE_S + 5)
    with WriteLock(tmp_path, timeout_s=5).hold():
        assert legacy.is_file()


def test_a_live_earlier_version_lock_directory_is_waited_for(tmp_path: Path) -> None:
    legacy = tmp_path / LOCK_TARGET_NAME
    legacy.mkdir()
    with pytest.raises(StoreBusy, match="earlier memory-mcp"), WriteLock(tmp_path, timeout_s=0.2).hold():
        pass
    assert legacy.is_dir()


def test_a_lock_taken_over_while_held_is_left_to_its_new_holder(tmp_path: Path) -> None:
    path = tmp_path / LOCK_DIR_NAME
    lock = WriteLock(tmp_path, timeout_s=5)
    with lock.hold():
        # Another writer decided we were stale: it removed our directory and made its own.
        os.rmdir(path)
        os.mkdir(path)
        _age(path, 1)
        theirs = path.stat().st_mtime_ns
        lock.touch_if_held()
        assert path.stat().st_mtime_ns == theirs  # not refreshed: proper-lockfile would call it compromised
    assert path.is_dir()  # not released under the new holder


def test_one_file_lease_on_a_path_is_held_at_a_time_and_passes_on_when_closed(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3.flush-lock"
    first, second = FileLease(path), FileLease(path)  # two instances on one host sharing a journal file
    assert first.held() and first.held()  # taken once, then kept
    assert not second.held()
    first.close()
    assert second.held() and not first.held()
    second.close()
