"""The one flusher: folds the journal into the LanceDB table in batches, about once a second.

Each round takes the write lock once (the plugin's lock on one machine, so its retries find it free
between rounds), reads the entries no flush has folded in yet (another server on the directory may
have flushed them meanwhile), folds them per id (``entries.fold``), commits (deletes, one append, patches
grouped by their columns) and records the flush in the journal, all under that one hold.

A flush is idempotent by id: rows an interrupted round committed before it could record the flush are
found in the table and rewritten whole instead of appended again, so a crash between the LanceDB commit
and the journal's record neither loses nor doubles a row.

In team mode only the holder of the flush lease (``postgres_journal.FlushLease``) flushes, so the bucket
sees one writer. The flusher also decides when the table's fragments are merged or compacted (the
``Housekeeper`` runs them in its own thread), by the rows and commits it wrote.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Protocol

from app.memory import repair
from app.memory.journal.base import Journal, Marker
from app.memory.journal.entries import fold, patch_groups
from app.memory.journal.overlay import Overlay
from app.memory.store.housekeeping import Housekeeper
from app.memory.store.table import Store
from app.settings import Settings

logger = logging.getLogger(__name__)

IDLE_MERGE_S = 120.0  # no flush for this long, with a tail to merge: merge it
COMPACT_GROWTH = 16  # compact once the rows written since the last compaction reach 1/16 of the table
TAIL_MERGE_COMMITS = 128  # merge the fragments of the last commits this often
PURGE_EVERY_S = 60.0
RETRY_MAX_S = 10.0
# Crash tests arm a failpoint by creating a file of its name in this directory: the process then dies there,
# as a kill -9 at that instant would leave it (tests/team/test_team_chaos.py).
FAILPOINTS_DIR = os.environ.get("MEMORY_MCP_TEST_FAILPOINTS_DIR")


def failpoint(name: str) -> None:
    if FAILPOINTS_DIR is not None and os.path.exists(os.path.join(FAILPOINTS_DIR, name)):
        logger.warning("failpoint %s armed: exiting as a crash would", name)
        os._exit(137)


class Lease(Protocol):
    def held(self) -> bool: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Flushed:
    marker: Marker
    entries: int
    rows_added: int
    commits: int


class Flusher:
    """Owns the flush loop of one table; ``start`` once, ``close`` flushes what is left and stops."""

    def __init__(self, store: Store, journal: Journal, overlay: Overlay, settings: Settings,
                 lease: Lease | None = None) -> None:
        self.store = store
        self.journal = journal
        self.overlay = overlay
        self.settings = settings
        self.lease = lease
        self.housekeeper = Housekeeper(store, settings)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = False
        self._stop = asyncio.Event()  # ends the loop's pauses at once when the server stops
        self._last_start = 0.0
        self._last_purge = time.monotonic()
        self._failures = 0
        self.last_error: str | None = None
        self.damage: str | None = None  # what is wrong with the table (``repair``): no commit while it lasts
        self._damage_checked = -repair.CHECK_EVERY_S  # looked for at the first round
        self.holds_lease = lease is None  # whether this instance flushes (team mode: the lease holder only)
        self.held_s: deque[float] = deque(maxlen=1024)  # how long each round held the write lock
        self.commits = 0
        self.flushes = 0
        self.rows_flushed = 0
        self._commits_since_compact = 0
        self._rows_since_compact = 0
        self._table_rows: int | None = None
        self._commits_since_merge = 0
        self._rows_since_merge = 0

    @property
    def alive(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        self.housekeeper.start()
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.create_task(self._run(), name="memory-flusher")
        self._task.add_done_callback(_log_crash)

    def wake(self) -> None:
        """New entries: flush them at the next round (never blocks)."""
        self._wake.set()

    def wake_soon(self) -> None:
        """``wake`` from a thread other than the event loop's."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._wake.set)

    async def close(self) -> None:
        """Flush what is waiting (when this instance may), then stop the loop and the housekeeping thread."""
        self._stopping = True
        self._stop.set()
        self._wake.set()
        if self._task is not None:
            await asyncio.shield(self._task)
        await asyncio.to_thread(self.housekeeper.close)
        if self.lease is not None:
            await asyncio.to_thread(self.lease.close)

    async def flush_now(self) -> Flushed | None:
        """One round at once (tests, ``close``, the ``flush`` command); None when there was nothing to fold.
        Its commits count towards merges and compactions as the loop's do."""
        done = await asyncio.to_thread(self.round)
        if done is not None:
            await self._housekeep()
        return done

    async def _run(self) -> None:
        interval = self.settings.flush_interval_s
        while True:
            if not self._stopping:
                await self._wait_for_work(interval)
            if self._stopping and (self.overlay.unflushed == 0 or self._failures or self.damage is not None
                                   or not await self._may_flush()):
                return
            if not await self._may_flush() or not await self._table_whole():
                continue
            self._last_start = time.monotonic()
            try:
                await asyncio.to_thread(self.round)
                self._failures, self.last_error = 0, None
            except Exception as exc:  # noqa: BLE001 - the entries stay in the journal; the next round retries
                self._failures += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                if await self._table_whole(force=True):
                    logger.exception("flushing the write journal into the table failed (attempt %d); retrying",
                                     self._failures)
                if not self._stopping:
                    await self._pause(min(RETRY_MAX_S, 0.5 * 2 ** self._failures))
            await self._housekeep()

    async def _wait_for_work(self, interval: float) -> None:
        """Until entries wait and a second has passed since the last round began (or an idle merge is due)."""
        while not self._stopping:
            if self.overlay.unflushed:
                # Jittered: a period of exactly a second would meet proper-lockfile's retries, 1, 2, 4 ... s
                # after a try that found our lock, at our next rounds every time.
                pause = self._last_start + interval * random.uniform(0.75, 1.25) - time.monotonic()  # noqa: S311
                if pause <= 0:
                    return
                await self._pause(pause)  # pacing: one commit a second, as many rows as are waiting
                return
            self._wake.clear()
            merging = self._commits_since_merge > 1
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=min(IDLE_MERGE_S, repair.CHECK_EVERY_S))
            except TimeoutError:
                if merging and time.monotonic() - self._last_start >= IDLE_MERGE_S:
                    self._merge_tail()
                await self._table_whole()  # damage is looked for while idle too

    async def _pause(self, seconds: float) -> None:
        """Sleep, unless the server stops meanwhile (a stop flushes what waits at once)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), timeout=seconds)

    async def _table_whole(self, force: bool = False) -> bool:
        """Whether the table can take a flush: looked at again every ``repair.CHECK_EVERY_S`` (or when asked);
        while it is damaged, writes wait in the journal and one line says why."""
        if force or time.monotonic() - self._damage_checked >= repair.CHECK_EVERY_S:
            self._damage_checked = -repair.CHECK_EVERY_S  # looked for at the first round
            found = await asyncio.to_thread(repair.damage, self.settings)
            if found != self.damage:
                if found is not None:
                    logger.error("the memory table is damaged: %s; writes wait in the journal until "
                                 "`memory-mcp repair` (or doctor --fix) brings it back", found)
                else:
                    logger.warning("the memory table is whole again: flushing the journal")
                self.damage = found
        if self.damage is not None and not self._stopping:
            await self._pause(min(self.settings.flush_interval_s * 5, repair.CHECK_EVERY_S))
        return self.damage is None

    async def _may_flush(self) -> bool:
        if self.lease is None:
            return True
        held = await asyncio.to_thread(self.lease.held)
        self.holds_lease = held
        if not held and not self._stopping:
            await self._pause(self.settings.flush_interval_s)  # another instance flushes; look again later
        return held

    def round(self) -> Flushed | None:
        """One flush, if this instance may (team mode: the lease holder only); None when it folded nothing."""
        if self.lease is not None and not self.lease.held():
            return None
        # Other writers' commits are read into the index before the lock is taken, so the lock is held for
        # our own commit, not for reading theirs (the plugin's retries wait 1, 2, 4 ... s while we hold it).
        self.store.refresh_cache()
        done = self.store.locked(self._timed_flush_held)
        if done is None:  # another server on the directory folded them in: learn how far
            self.overlay.flushed([self.journal.flushed()])
            return None
        self.overlay.flushed([done.marker])
        self.overlay.index_at(self.store.cache.version if self.store.cache is not None else None)
        self.flushes += 1
        self.rows_flushed += done.entries
        self.commits += done.commits
        self._count(done.rows_added, done.commits)
        return done

    def _timed_flush_held(self) -> Flushed | None:
        started = time.perf_counter()
        try:
            return self._flush_held()
        finally:
            self.held_s.append(time.perf_counter() - started)

    def _flush_held(self) -> Flushed | None:
        """One flush under the write lock (``Store.locked`` reruns it whole after a transient conflict)."""
        through = self.journal.flushed().through_seq
        entries = self.journal.read_after(through, self.settings.flush_batch_max)
        if not entries:
            return None
        plan = fold(entries)
        commits = 0
        deletes = self.store.existing_ids(plan.deletes)
        if deletes:
            self.store.delete_held(sorted(deletes))
            commits += 1
        again = self.store.existing_ids(list(plan.adds))  # committed by a round that could not record it
        patches = dict(plan.patches)
        for memory_id in again:
            patches[memory_id] = {k: v for k, v in plan.adds.pop(memory_id).items() if k != "id"}
        if plan.adds:
            self.store.add_held(list(plan.adds.values()))
            commits += 1
        for _, rows in patch_groups(patches):
            self.store.patch_held(rows)
            commits += 1
        marker = Marker(entries[-1].seq, self.store.probe.current())
        failpoint("flush_committed")  # in the table, not yet recorded: the window a flush must survive
        self.journal.mark_flushed(marker)
        return Flushed(marker, len(entries), len(plan.adds) + len(patches), commits)

    # --- housekeeping: when to merge fragments and compact ---------------------------------------

    def _count(self, rows: int, commits: int) -> None:
        self._rows_since_compact += rows
        self._rows_since_merge += rows
        self._commits_since_compact += commits
        self._commits_since_merge += commits
        self.housekeeper.wrote(rows)

    async def _housekeep(self) -> None:
        if await self._compaction_due():
            self._commits_since_compact = self._rows_since_compact = 0
            self._commits_since_merge = self._rows_since_merge = 0
            self._table_rows = None
            self.housekeeper.request_compaction()
        elif self._commits_since_merge >= TAIL_MERGE_COMMITS:
            self._merge_tail()
        if time.monotonic() - self._last_purge >= PURGE_EVERY_S:
            self._last_purge = time.monotonic()
            await asyncio.to_thread(self._purge)

    def _merge_tail(self) -> None:
        rows, self._rows_since_merge, self._commits_since_merge = self._rows_since_merge, 0, 0
        self.housekeeper.request_merge(rows)

    async def _compaction_due(self) -> bool:
        if self._commits_since_compact < self.settings.compact_every_commits:
            return False
        if self._table_rows is None:
            try:
                self._table_rows = await asyncio.to_thread(self.store.count)
            except Exception:  # noqa: BLE001 - no count, no size rule: compact as before
                logger.exception("counting the memory table failed")
                self._table_rows = 0
        return self._rows_since_compact * COMPACT_GROWTH >= self._table_rows

    def _purge(self) -> None:
        """Drop flushed entries older than the retention (kept that long for ``repair`` and for readers)."""
        try:
            before = int(time.time() * 1000) - int(self.settings.journal_retention_s * 1000)
            self.journal.purge(before)
        except Exception:  # noqa: BLE001 - the journal keeps them until the next try
            logger.warning("purging flushed journal entries failed", exc_info=True)

    def stats(self) -> dict[str, Any]:
        held = sorted(self.held_s)
        lock = {f"lock_held_p{q}_ms": round(held[min(len(held) - 1, len(held) * q // 100)] * 1000, 1)
                for q in (50, 99)} if held else {}
        return {"flushes": self.flushes, "rows_flushed": self.rows_flushed, "commits": self.commits,
                "flusher": self.holds_lease, "flush_error": self.last_error, **lock}


def _log_crash(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.critical("the journal flusher crashed; writes wait in the journal", exc_info=task.exception())
