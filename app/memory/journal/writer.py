"""The write front of the memory table: a write is acknowledged once the journal holds it durably.

``add``, ``update`` and ``delete`` append one entry each (a patch carries the whole row after it, for
reads) in the journal's order, put it in the overlay before answering, so the very next read on this
instance sees it, and wake the flusher. A poller reads other servers' and instances' entries and
flushes off the journal a few times a second, so they reach this instance's reads within a second.

What still refuses a write (HTTP 503, nothing written): the journal failing (disk full, its database
down: ``journal_unavailable``) and a journal too far behind the table (``MEMORY_MCP_JOURNAL_MAX_ROWS``
rows waiting: ``journal_full``). Slowness never does: a busy machine or a slow bucket makes writes wait
in the journal.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np

from app.errors import Unavailable
from app.memory.errors import JournalFull
from app.memory.journal.base import Journal
from app.memory.journal.entries import Entry
from app.memory.journal.flusher import Flusher, Lease
from app.memory.journal.overlay import Overlay
from app.memory.journal.view import JournaledView
from app.memory.store.table import Store
from app.settings import Settings

logger = logging.getLogger(__name__)

POLL_S = 0.25  # other writers' entries and flushes reach this instance within about this long
# Team mode: a read first looks for other instances' writes unless a poll began after the read was asked
# (concurrent reads share one), so a client whose calls a load balancer spreads over the instances reads what
# it just wrote (one query, ~1 ms). A poll that began earlier may have missed a write acknowledged since.
APPEND_TIMES_KEPT = 4096  # the last journal writes' durations, for /readyz and the benchmarks
POLL_BATCH = 10_000


def local_journal_path(settings: Settings) -> Path | None:
    """Where the SQLite journal of ``settings`` lives, or None in team mode (a database)."""
    from app.memory.journal.sqlite_journal import default_path

    if settings.team_db_url is not None:
        return None
    if settings.db_dir is not None:
        return settings.journal_path or default_path(settings.db_dir)
    digest = hashlib.sha256(settings.db_uri.encode()).hexdigest()[:12]
    return settings.journal_path or settings.kanban_db_path.parent / f"memory-mcp-journal-{digest}.sqlite3"


def open_journal(settings: Settings) -> tuple[Journal, Lease | None]:
    """The journal for ``settings`` (blocking): PostgreSQL in team mode, else a SQLite file.

    Raises:
        JournalUnavailable: it cannot be opened.
    """
    url = settings.team_db_url
    table_key = f"{settings.db_uri}/{settings.table}"
    if url is not None:
        from app.memory.journal.postgres_journal import FlushLease, PostgresJournal

        return PostgresJournal(url, table_key), FlushLease(url, table_key)
    from app.memory.journal.sqlite_journal import FileLease, SqliteJournal

    path = local_journal_path(settings)
    assert path is not None  # noqa: S101 - no team database
    if settings.db_dir is not None:  # the write lock orders the servers on the directory: no lease
        return SqliteJournal(path, settings.table), None
    # A bucket without a team database: a journal of this machine's own, beside its board.
    logger.warning("the memory table is on object storage but no team database is set (MEMORY_MCP_TEAM_DB): "
                   "this machine journals on its own (%s); other instances see its writes once flushed", path)
    return SqliteJournal(path, settings.table), FileLease(path)


class JournalWriter:
    """Acknowledges writes once journaled; owns the overlay, the view reads use, the poller and the flusher."""

    def __init__(self, store: Store, journal: Journal, settings: Settings, lease: Lease | None = None) -> None:
        self.store = store
        self.journal = journal
        self.settings = settings
        self.overlay = Overlay()
        self.view = JournaledView(store, self.overlay)
        self.flusher = Flusher(store, journal, self.overlay, settings, lease)
        self._polled_through = 0
        self._appended_through = 0
        self._poll_lock = threading.Lock()
        self._append_s: deque[float] = deque(maxlen=APPEND_TIMES_KEPT)  # the journal writes' durations
        self._poll_begun_at = -math.inf
        self._poller: asyncio.Task[None] | None = None
        self._closing = False
        store.on_new_table = self.overlay.forget_flushed
        if journal.across_machines:  # a team database: a read first takes in the other instances' writes
            self.view.before_read = self._fresh_for_read

    @classmethod
    def open(cls, store: Store, settings: Settings, *, table_went_back: bool = False) -> JournalWriter:
        """Open the journal and take in what no flush has folded into the table yet (blocking).

        ``table_went_back``: the table was opened at an older version than its newest (recovery quarantined
        a damaged head): the entries flushed past it are flushed again, so no acknowledged write is lost.

        Raises:
            JournalUnavailable: the journal cannot be opened.
        """
        journal, lease = open_journal(settings)
        writer = cls(store, journal, settings, lease)
        marker = journal.rewind(store.version()) if table_went_back else journal.flushed()
        writer.overlay.flushed([marker])
        writer._polled_through = marker.through_seq
        writer._take(journal.read_after(marker.through_seq, 1 << 62))
        waiting = writer.overlay.unflushed
        if waiting:
            logger.info("%d journal entries not yet in the table: served from the journal, flushed next", waiting)
        return writer

    # --- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        self.flusher.start()
        self._poller = asyncio.create_task(self._poll(), name="memory-journal-poller")

    async def flush(self) -> None:
        """Fold everything journaled so far into the table now, rather than at the next round (tests,
        benchmarks, commands that read the table itself)."""
        while self.overlay.unflushed:
            if await self.flusher.flush_now() is None and self.overlay.unflushed:
                await asyncio.to_thread(self._learn_flushes)
                if self.overlay.unflushed:
                    await asyncio.sleep(POLL_S)  # another instance holds the flush lease: its flush is awaited
        # A round of the flusher's own may have folded them, and not yet told the overlay that the index holds
        # them: until then its copies would hide a change another writer makes in the table next.
        self.overlay.index_at(self.store.cache.version if self.store.cache is not None else None)

    def _learn_flushes(self) -> None:
        self.overlay.flushed(self.journal.markers_after(self.overlay.flushed_through))

    async def close(self) -> None:
        """Refuse new writes, flush what waits, then stop."""
        self._closing = True
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
        try:
            await self.flusher.close()
        finally:
            await asyncio.to_thread(self.journal.close)

    @property
    def alive(self) -> bool:
        return self.flusher.alive and not self._closing

    @property
    def seen_seq(self) -> int:
        """The newest journal entry this instance knows of."""
        return max(self._polled_through, self._appended_through)

    @property
    def depth(self) -> int:
        """Journal entries not folded into the table yet."""
        return self.overlay.unflushed

    def status(self) -> dict[str, Any]:
        """For /readyz and doctor: how far behind the table is, and where the journal lives."""
        oldest = self.overlay.oldest_unflushed_ms()
        age = None if oldest is None else round(max(0.0, time.time() - oldest / 1000), 3)
        times = sorted(self._append_s)
        append = {f"p{q}_ms": round(times[min(len(times) - 1, len(times) * q // 100)] * 1000, 3)
                  for q in (50, 99)} if times else {}
        return {"where": self.journal.where, "depth": self.depth, "oldest_unflushed_age_s": age,
                "append": {**append, "n": len(times)}, **self.flusher.stats()}

    # The flusher's and the housekeeper's counters, under the names the rest of the service knows.
    @property
    def commits(self) -> int:
        return self.flusher.commits

    @property
    def compactions(self) -> int:
        return self.flusher.housekeeper.compactions

    @property
    def tail_merges(self) -> int:
        return self.flusher.housekeeper.tail_merges

    @property
    def skipped_for_lease(self) -> int:
        return self.flusher.housekeeper.skipped_for_lease

    @property
    def housekeeper(self) -> Any:
        return self.flusher.housekeeper

    async def housekeeping_idle(self, timeout_s: float = 60.0) -> bool:
        """Wait until no tail merge or compaction is asked for or running; False on timeout."""
        return await asyncio.to_thread(self.flusher.housekeeper.wait_idle, timeout_s)

    # --- writes ------------------------------------------------------------------------------------

    async def add(self, rows: list[dict[str, Any]]) -> list[str]:
        """Journal new rows (each with a fresh id); returns their ids once durable.

        Raises:
            JournalUnavailable, JournalFull, Unavailable (shutting down): nothing was written.
        """
        await self._append([Entry("add", str(row["id"]), dict(row)) for row in rows])
        return [str(row["id"]) for row in rows]

    async def update(self, memory_id: str, values: dict[str, Any]) -> int:
        """Journal a change of some columns; returns 0 when the memory is gone, else 1."""
        rows = await asyncio.to_thread(self.view.get_rows, [memory_id])
        if not rows:
            return 0
        vector = values.get("vector")
        if vector is None:
            vector = await asyncio.to_thread(self.view.get_vector, memory_id)
            if vector is None:
                return 0
        row = {**rows[0], **values, "vector": np.asarray(vector, dtype=np.float32)}
        await self._append([Entry("patch", memory_id, row, tuple(values))])
        return 1

    async def delete(self, memory_id: str) -> int:
        if not await asyncio.to_thread(self.view.get_rows, [memory_id], ["id"]):
            return 0
        await self._append([Entry("delete", memory_id)])
        return 1

    async def _append(self, entries: list[Entry]) -> None:
        if self._closing:
            raise Unavailable("the memory store is shutting down; retry shortly", code="store_closing",
                              retry_after_s=1)
        if self.overlay.unflushed + len(entries) > self.settings.journal_max_rows:
            raise JournalFull(f"{self.overlay.unflushed} writes wait to reach the table (the bound is "
                              f"MEMORY_MCP_JOURNAL_MAX_ROWS={self.settings.journal_max_rows}); retry",
                              retry_after_s=2)
        started = time.perf_counter()
        written = await asyncio.to_thread(self.journal.append, entries)
        self._append_s.append(time.perf_counter() - started)
        self.overlay.add(written)
        self._appended_through = max(self._appended_through, written[-1].seq)
        self.flusher.wake()

    # --- other writers' entries and flushes --------------------------------------------------------

    def _take(self, entries: list[Entry]) -> bool:
        """Entries read off the journal; True when some were new to this instance."""
        if not entries:
            return False
        self._polled_through = max(self._polled_through, entries[-1].seq)
        return self.overlay.add(entries) > 0

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(POLL_S)
            try:
                news = await asyncio.to_thread(self.poll_once)
            except Exception:  # noqa: BLE001 - the next poll retries; this instance's own writes are unaffected
                logger.warning("reading the write journal failed; retrying", exc_info=True)
                continue
            if news:
                self.flusher.wake()
            if self.store.cache is not None:
                await asyncio.to_thread(self.store.read_at)  # starts reading other writers' commits, if any
                self.overlay.index_at(self.store.cache.version)

    def _fresh_for_read(self) -> None:
        try:
            self.poll_once(begun_after=time.monotonic())
        except Exception:  # noqa: BLE001 - a read answers from what is known; the poller reports the journal
            logger.debug("the journal could not be read before a read", exc_info=True)

    def poll_once(self, begun_after: float = math.inf) -> bool:
        """Read other writers' entries and flushes off the journal (blocking); True when there were new entries.
        ``begun_after``: skip it if a poll began after this monotonic time (it saw everything acknowledged then);
        by default it always runs."""
        with self._poll_lock:
            if self._poll_begun_at > begun_after:
                return False
            begun = time.monotonic()
            newest = self.journal.flushed()
            if newest.through_seq < self.overlay.flushed_through:  # rewound by a repair: flush those again
                logger.warning("the journal's flushes past entry %d were forgotten (the table was repaired): "
                               "flushing them again", newest.through_seq)
                self.overlay.rewound(newest, self.journal.read_after(newest.through_seq, 1 << 62))
                self.flusher.wake_soon()
            entries = self.journal.read_after(self._polled_through, POLL_BATCH)
            markers = self.journal.markers_after(self.overlay.flushed_through)
            news = self._take(entries)
            self.overlay.flushed(markers)
            self._poll_begun_at = begun  # only a poll that succeeded counts for later reads
            return news
