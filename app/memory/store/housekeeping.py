"""Tail merges, compactions and pruning in their own thread, off the write path.

Why a thread of their own: run inside the writer task, a compaction (seconds on object storage, longer
under contention) held up every write queued behind it, and on S3 the instance holding the compaction
lease stalled all its clients at once (remember p99 45 s with 3 instances on moto). The writer now only
asks for a rewrite (``request_merge``, ``request_compaction``) and goes on committing.

How commits still order correctly:

- A local table: the rewrite runs through ``Store.commit`` as before, under the cross-process write lock
  (shared with memory-lancedb-pro) and the store's handle lock, so it never overlaps one of our commits
  and the vector cache is told the versions around it. Writes wait for the lock while it runs, as they
  would for the plugin's own writes.
- Object storage (team mode): the rewrite runs on a table handle of its own, under neither lock, and
  only while this instance holds the compaction lease (``lease``), which it renews meanwhile. Lance's
  conditional-put commits order it against the writer's appends like another instance's commit: an
  append and a compaction both land, each rebased on the other; a real conflict (a delete of a row the
  rewrite moved) is retried (``commits.locked_with_retry``). The vector cache is not told: it takes the
  rewrite in like any other instance's (``cache_sync``). Then the holder prunes old versions by number
  (``retention.first_kept_seen``), and, when writes have stopped, prunes once more after
  ``PRUNE_IDLE_S`` so a quiet team keeps at most ``retention.MAX_VERSIONS_KEPT`` versions.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from app import heap
from app.memory.index import VectorCache
from app.memory.store import commits, connection, retention, tail_merge
from app.memory.store.lease import CompactionLease
from app.memory.store.table import Store
from app.memory.store.writes import OLD_VERSIONS_KEPT
from app.settings import Settings

logger = logging.getLogger(__name__)

PRUNE_IDLE_S = 10.0  # >= retention.READER_GRACE: the versions seen at the last round may go by then


class _NoLock:
    """Object storage: a rewrite takes no lock of this process; Lance's commits order it."""

    def hold(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()


class _OwnHandle:
    """The table as a rewrite on object storage sees it (``tail_merge.Store``): a handle of its own, and
    commits that neither wait for the writer's nor tell the cache."""

    def __init__(self, table: Any, store: Store) -> None:
        self.table = table
        self.db_path = store.db_path
        self.storage_options = store.storage_options
        self.id_index_tried = store.id_index_tried

    def version(self) -> int:
        return int(self.table.version)

    def count(self, where: str | None = None) -> int:
        return int(self.table.count_rows(where))

    def scan(self, where: str | None, columns: Sequence[str], limit: int | None = None) -> pa.Table:
        query = self.table.search()
        if where:
            query = query.where(where)
        return query.select(list(columns)).limit(limit).to_arrow()

    def commit(self, change: Callable[[int | None], Any], tell: Callable[[VectorCache, Any, int], None]) -> Any:
        return commits.locked_with_retry(_NoLock(), lambda: change(None))


class Housekeeper:
    """One thread per store; ``start`` once, ``close`` finishes the rewrite under way and stops."""

    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings
        self.team = settings.on_object_store
        self._cond = threading.Condition()
        self._rows_written = 0  # rows our commits added or rewrote at the end, since start
        self._merge_from = 0  # where in that count the tail to merge begins
        self._missed_from: int | None = None  # a merge that commits overtook may have missed rows from here
        self._merge_wanted = False
        self._compact_wanted = False
        self._prune_wanted = False
        self._busy = False
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._lease: CompactionLease | None = None
        self._own: _OwnHandle | None = None
        self._pruned_below = 1  # versions before it were pruned by this instance (or never existed)
        self.sightings = retention.Sightings()
        # Test hook: called in this thread just before each rewrite ("merge" or "compact").
        self.before_rewrite: Callable[[str], None] | None = None
        self.compactions = 0
        self.tail_merges = 0
        self.prunes = 0
        self.skipped_for_lease = 0  # rounds left to the instance holding the compaction lease

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="memory-housekeeping", daemon=True)
        self._thread.start()

    def close(self, timeout_s: float = 120.0) -> None:
        """Stop after the rewrite under way (blocking); rewrites asked for but not started are dropped."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def request_merge(self, rows: int) -> None:
        """Merge the fragments of the last ``rows`` rows soon, and of those written until it runs
        (never blocks)."""
        with self._cond:
            if not self._merge_wanted:
                self._merge_from = self._rows_written - rows
                if self._missed_from is not None:
                    self._merge_from, self._missed_from = min(self._merge_from, self._missed_from), None
            self._merge_wanted = True
            self._cond.notify_all()

    def request_compaction(self) -> None:
        """Compact the table soon (never blocks); a merge asked for meanwhile is part of it."""
        with self._cond:
            self._compact_wanted = True
            self._cond.notify_all()

    def wrote(self, rows: int) -> None:
        """A commit added or rewrote ``rows`` rows at the end; on object storage, prune when writes stop
        (never blocks)."""
        with self._cond:
            self._rows_written += rows
            if self.team:
                self._prune_wanted = True
                self._cond.notify_all()  # restarts the idle wait: prune once writes stop

    def wait_idle(self, timeout_s: float) -> bool:
        """Block until no rewrite is asked for or running; returns False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._busy or self._compact_wanted or self._merge_wanted:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True

    def _run(self) -> None:
        while True:
            with self._cond:
                idle = self._wait_for_work()
                if self._stopping:
                    self._cond.notify_all()
                    return
                compact, merge = self._compact_wanted, self._merge_wanted
                written, start = self._rows_written, self._merge_from

                if idle:  # writes stopped with versions to prune: once; ``_prune`` asks again if some stay
                    self._prune_wanted = False
                self._compact_wanted = self._merge_wanted = False
                self._busy = True
            try:
                # A merge takes the last rows of the table as it finds it; rows committed meanwhile push
                # the oldest of this tail out of its reach, so the next merge reaches back for them too.
                self._round("compact" if compact else "merge" if merge else "prune", written - start)
            finally:
                with self._cond:
                    if merge and not compact and self._rows_written != written:
                        self._missed_from = start
                    self._busy = False
                    self._cond.notify_all()

    def _wait_for_work(self) -> bool:
        """Wait (holding the condition) for a request or stop; True when instead no commit came for
        ``PRUNE_IDLE_S`` while versions wait to be pruned."""
        while not (self._stopping or self._compact_wanted or self._merge_wanted):
            if not self._prune_wanted:
                self._cond.wait()
            elif not self._cond.wait(PRUNE_IDLE_S):
                return True
        return False

    def _round(self, kind: str, rows: int) -> None:
        try:
            if not self.team:
                self._local(kind, rows)
            else:
                self._on_object_store(kind, rows)
        except Exception:  # noqa: BLE001 - housekeeping: writes go on without it; the next round retries
            logger.exception("memory table %s failed; will retry later", kind)

    def _local(self, kind: str, rows: int) -> None:
        """Through ``Store.commit``: under the write lock, the cache told (see the module docstring)."""
        if kind == "prune":
            return
        self._hook(kind)
        if kind == "compact":
            self.store.optimize()
            self.compactions += 1
        else:
            self.store.merge_tail(rows)
            self.tail_merges += 1
        heap.release_free_memory()  # a rewrite's read and join buffers

    def _on_object_store(self, kind: str, rows: int) -> None:
        lease, own = self._team_handles()
        with lease.held() as mine:
            if not mine:
                self.skipped_for_lease += 1
                return
            if kind != "prune":
                self._hook(kind)
                if kind == "compact":
                    commits.locked_with_retry(_NoLock(), own.table.optimize)
                    self.compactions += 1
                else:
                    tail_merge.merge_tail(own, rows)
                    self.tail_merges += 1
                heap.release_free_memory()
            if not lease.lost:
                self._prune(own)

    def _prune(self, own: _OwnHandle) -> None:
        """Prune by number the versions before the oldest kept (``retention``): no listing of
        ``_versions/`` (a read of every manifest); numbers already gone are skipped by Lance."""
        newest = own.version()
        first = retention.first_kept_seen(newest, self.sightings, OLD_VERSIONS_KEPT)
        if first > self._pruned_below:
            own.table.to_lance().cleanup_old_versions(versions=list(range(self._pruned_below, first)))
            self._pruned_below = first
            self.prunes += 1
        with self._cond:  # more than the bound left (too young to go yet): prune again when idle
            self._prune_wanted = newest - max(first, 1) + 1 > retention.MAX_VERSIONS_KEPT

    def _team_handles(self) -> tuple[CompactionLease, _OwnHandle]:
        if self._lease is None or self._own is None:
            db = connection.connect(self.settings)
            self._lease = CompactionLease(db, self.settings.table)
            self._own = _OwnHandle(db.open_table(self.settings.table), self.store)
        return self._lease, self._own

    def _hook(self, kind: str) -> None:
        if self.before_rewrite is not None:
            self.before_rewrite(kind)
