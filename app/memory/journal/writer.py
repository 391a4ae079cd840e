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
import time
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
POLL_BATCH = 10_000


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
    from app.memory.journal.sqlite_journal import SqliteJournal, default_path
    from app.memory.store.locks import FileLease

    if settings.journal_path is not None:
        path = settings.journal_path
    elif settings.db_dir is not None:
        path = default_path(settings.db_dir)
    else:  # a bucket without a team database: a journal of this instance's own, beside its board
        digest = hashlib.sha256(settings.db_uri.encode()).hexdigest()[:12]
        path = settings.kanban_db_path.parent / f"memory-mcp-journal-{digest}.sqlite3"
        logger.warning("the memory table is on object storage but no team database is set "
                       "(MEMORY_MCP_TEAM_DB): this instance journals and flushes on its own (%s)", path)
    # On object storage no write lock spans the instances sharing this file: one of them flushes it.
    lease = FileLease(path.with_name(path.name + ".flush-lock")) if settings.on_object_store else None
    return SqliteJournal(path, settings.table), lease


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
        self._poller: asyncio.Task[None] | None = None
        self._closing = False
        store.on_new_table = self.overlay.forget_flushed

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
        return {"where": self.journal.where, "depth": self.depth, "oldest_unflushed_age_s": age,
                "flushes": self.flusher.flushes, "commits": self.flusher.commits,
                "flush_error": self.flusher.last_error}

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
        written = await asyncio.to_thread(self.journal.append, entries)
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
                entries, markers = await asyncio.to_thread(self._read_news)
            except Exception:  # noqa: BLE001 - the next poll retries; this instance's own writes are unaffected
                logger.warning("reading the write journal failed; retrying", exc_info=True)
                continue
            if self._take(entries):
                self.flusher.wake()
            self.overlay.flushed(markers)
            cache = self.store.cache
            if cache is not None:
                await asyncio.to_thread(self.store.read_at)  # starts reading other writers' commits, if any
                self.overlay.index_at(cache.version)

    def _read_news(self) -> tuple[list[Entry], list[Any]]:
        return (self.journal.read_after(self._polled_through, POLL_BATCH),
                self.journal.markers_after(self.overlay.flushed_through))
