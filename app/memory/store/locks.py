"""Cross-process write lock around every commit to the shared LanceDB directory.

Two layers, always taken in this order and released in reverse:

1. ``fcntl.flock`` on ``<db>/.memory-mcp-write.flock`` for our own processes: the kernel releases
   it when a holder dies, so our processes queue on it without polling.
2. The lock memory-lancedb-pro (OpenClaw) takes around its writes, proper-lockfile's protocol on the
   target file ``<db>/.memory-write.lock``: that file is an empty regular file that persists, and the
   lock itself is the *directory* ``<db>/.memory-write.lock.lock``. ``mkdir`` is atomic, so whoever
   creates it holds it. The holder refreshes the directory's mtime (proper-lockfile every 5 s, we every
   ``REFRESH_S``); a directory not refreshed for ``STALE_S`` belongs to a dead holder, and the next
   writer removes it and takes the lock. A holder that finds the mtime changed under it has lost the
   lock (proper-lockfile calls it compromised) and must not remove the other holder's directory.

Earlier memory-mcp versions took the lock as the directory ``<db>/.memory-write.lock`` itself; such a
directory is turned back into the plugin's target file before the first lock (``prepare_target``).

Both are blocking calls: take the lock in the writer thread, never on the event loop.

Neither reaches across machines, so a table on object storage gets ``ProcessLock`` instead: it only
orders this process's own commits, and LanceDB's conditional-put commits order the instances
(docs/operations.md, 'Team mode').
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import random
import stat
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from app.memory.errors import StoreBusy

logger = logging.getLogger(__name__)

LOCK_TARGET_NAME = ".memory-write.lock"  # the plugin's lock target: an empty regular file that persists
LOCK_DIR_NAME = LOCK_TARGET_NAME + ".lock"  # the lock itself (proper-lockfile's `${target}.lock`)
FLOCK_NAME = ".memory-mcp-write.flock"
STALE_S = 10.0  # what memory-lancedb-pro passes to proper-lockfile
REFRESH_S = 2.5  # well inside STALE_S / 2, the refresh period proper-lockfile uses
# proper-lockfile retries after 1, 2, 4, ... 30 s, one mkdir each. We take the lock once per journal flush
# (about once a second, held for the flush), so its tries find the lock free most of the time.


class CommitLock(Protocol):
    """What a commit holds: ``WriteLock`` on a local directory, ``ProcessLock`` on object storage."""

    def hold(self) -> AbstractContextManager[None]: ...


class ProcessLock:
    """This process's threads only, with the same timeout and error as ``WriteLock``."""

    def __init__(self, timeout_s: float = 30.0) -> None:
        self.timeout_s = timeout_s
        self._thread_lock = threading.Lock()

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """Hold the lock for the block.

        Raises:
            StoreBusy: another thread of this process held it for longer than ``timeout_s``.
        """
        if not self._thread_lock.acquire(timeout=self.timeout_s):
            raise StoreBusy("the memory store is busy (write lock held in this process); retry", retry_after_s=1)
        try:
            yield
        finally:
            self._thread_lock.release()


class WriteLock:
    """Re-usable, thread-safe (one holder at a time) cross-process lock for one database directory."""

    def __init__(self, db_path: Path, timeout_s: float = 30.0) -> None:
        self.db_path = db_path
        self.timeout_s = timeout_s
        self.target_path = db_path / LOCK_TARGET_NAME
        self.dir_path = db_path / LOCK_DIR_NAME
        self.flock_path = db_path / FLOCK_NAME
        self._thread_lock = threading.Lock()
        self._target_ready = False
        # The refresher is one thread for the lock's lifetime, not one per commit: starting and
        # joining a thread each waits for a GIL hand-off, which costs milliseconds under load
        # (docs/performance.md, 'Write lock').
        self._held_guard = threading.Lock()  # the refresher touches only a directory we hold
        self._held = False
        self._mtime_ns: int | None = None  # the lock directory's mtime as we last set it
        self._refresher: threading.Thread | None = None

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """Hold both locks for the block.

        Raises:
            StoreBusy: another writer held the lock for longer than ``timeout_s``.
        """
        deadline = time.monotonic() + self.timeout_s
        if not self._thread_lock.acquire(timeout=self.timeout_s):
            raise StoreBusy("the memory store is busy (write lock held in this process); retry", retry_after_s=1)
        try:
            with self._flock(deadline):
                if not self._target_ready:
                    prepare_target(self.db_path, deadline)
                    self._target_ready = True
                with self._dir_lock(deadline):
                    yield
        finally:
            self._thread_lock.release()

    @contextlib.contextmanager
    def _flock(self, deadline: float) -> Iterator[None]:
        self.db_path.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.flock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            _poll(lambda: _try_flock(fd), deadline, "another memory-mcp process")
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def _dir_lock(self, deadline: float) -> Iterator[None]:
        _poll(self._try_mkdir, deadline, "another writer (memory-lancedb-pro?)")
        with self._held_guard:
            self._held = True
        if self._refresher is None:
            self._refresher = threading.Thread(target=_refresh_while_alive, args=(weakref.ref(self),),
                                               name="memory-lock-refresh", daemon=True)
            self._refresher.start()
        try:
            yield
        finally:
            with self._held_guard:
                self._held = False
                if self._still_ours():
                    with contextlib.suppress(FileNotFoundError):
                        os.rmdir(self.dir_path)
                else:
                    logger.warning("write lock %s was taken over by another writer while we held it; "
                                   "leaving it to that writer", self.dir_path)

    def _try_mkdir(self) -> bool:
        """One attempt, as proper-lockfile makes it: mkdir; on a stale lock, remove it and mkdir once more."""
        if self._mkdir():
            return True
        try:
            age = time.time() - os.stat(self.dir_path).st_mtime
        except FileNotFoundError:
            return self._mkdir()  # released between our mkdir and stat
        if age <= STALE_S:
            return False
        logger.warning("taking over the stale write lock %s (not refreshed for %.1f s)", self.dir_path, age)
        with contextlib.suppress(FileNotFoundError, NotADirectoryError, OSError):
            os.rmdir(self.dir_path)
        return self._mkdir()

    def _mkdir(self) -> bool:
        try:
            os.mkdir(self.dir_path)
        except FileExistsError:
            return False
        self._mtime_ns = os.stat(self.dir_path).st_mtime_ns
        return True

    def _still_ours(self) -> bool:
        try:
            return os.stat(self.dir_path).st_mtime_ns == self._mtime_ns
        except FileNotFoundError:
            return False

    def touch_if_held(self) -> None:
        """Refresh the lock directory's mtime if this process holds it (a holder's heartbeat); a lock
        another writer took over meanwhile is left alone, as proper-lockfile leaves a compromised one."""
        with self._held_guard:
            if not self._held:
                return
            if not self._still_ours():
                logger.warning("write lock %s was taken over by another writer while we held it", self.dir_path)
                return
            with contextlib.suppress(FileNotFoundError):
                os.utime(self.dir_path)
                self._mtime_ns = os.stat(self.dir_path).st_mtime_ns


def prepare_target(db_path: Path, deadline: float) -> None:
    """Make ``<db>/.memory-write.lock`` the plugin's lock target, an empty regular file.

    An earlier memory-mcp took its lock by creating that path as a directory; a live one (refreshed
    within ``STALE_S``) is waited for, then the directory is replaced by the file.

    Raises:
        StoreBusy: a legacy lock directory stayed live until ``deadline``.
    """
    target = db_path / LOCK_TARGET_NAME

    def ready() -> bool:
        with contextlib.suppress(FileNotFoundError):
            info = os.lstat(target)
            if not stat.S_ISDIR(info.st_mode):
                return True
            if time.time() - info.st_mtime <= STALE_S:
                return False  # an earlier memory-mcp holds it right now
            try:
                os.rmdir(target)
            except FileNotFoundError:
                pass
            except OSError:
                return False
            logger.warning("replaced the lock directory %s of an earlier memory-mcp by the lock file "
                           "memory-lancedb-pro expects", target)
        with contextlib.suppress(FileExistsError):
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644))
        return True

    _poll(ready, deadline, "an earlier memory-mcp version (lock directory .memory-write.lock)")


def _refresh_while_alive(lock: weakref.ref[WriteLock]) -> None:
    """Every ``REFRESH_S``, touch the lock if held, so other processes do not think a long commit
    (optimize) died; a held lock is thus touched at most ``REFRESH_S`` after any moment. Ends with the lock."""
    while True:
        time.sleep(REFRESH_S)
        holder = lock()
        if holder is None:
            return
        holder.touch_if_held()
        del holder


def _try_flock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            return False
        raise


def _poll(attempt: Callable[[], bool], deadline: float, holder: str) -> None:
    """Retry ``attempt()`` with short jittered waits until it succeeds or the deadline passes."""
    delay = 0.002
    while not attempt():
        if time.monotonic() >= deadline:
            raise StoreBusy(f"the memory store is busy: {holder} holds the write lock; retry", retry_after_s=1)
        # A lock held by another process has no event to wait on: back off (in the writer thread).
        time.sleep(delay * random.uniform(0.5, 1.5))  # noqa: S311 - jitter, not security
        delay = min(delay * 2, 0.02)  # short: a long nap loses every race to a spinning peer


class FileLease:
    """Whether this instance is the one that flushes a journal file other instances on this host may share, when
    the table has no cross-process write lock (object storage without a team database): an ``flock`` on
    ``path``, taken once and kept until ``close`` (the kernel releases it when the holder dies)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._lock = threading.Lock()

    def held(self) -> bool:
        """Take or keep the lease; False while another open file holds it, or it cannot be taken (blocking,
        briefly)."""
        with self._lock:
            if self._fd is None:
                try:
                    fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
                except OSError:
                    logger.warning("the flush lease %s cannot be opened; this instance does not flush meanwhile",
                                   self.path, exc_info=True)
                    return False
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError as exc:
                    os.close(fd)
                    if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                        logger.warning("the flush lease %s cannot be taken; this instance does not flush meanwhile",
                                       self.path, exc_info=True)
                    return False
                self._fd = fd
            return True

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)  # closing the only descriptor releases the flock
                self._fd = None
