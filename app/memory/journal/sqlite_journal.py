"""The journal on one machine: a SQLite file beside the table, in WAL mode with ``synchronous=FULL``.

Every server on the directory opens the same file, so two servers share one journal. ``BEGIN
IMMEDIATE`` serialises appends across processes, which keeps sequence numbers in commit order.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from app.memory.errors import JournalUnavailable
from app.memory.journal.base import Depth, GroupCommit, Marker
from app.memory.journal.entries import Entry

logger = logging.getLogger(__name__)

BUSY_TIMEOUT_S = 30.0
SCHEMA = (
    """CREATE TABLE IF NOT EXISTS entries (
        seq INTEGER PRIMARY KEY AUTOINCREMENT, table_name TEXT NOT NULL, op TEXT NOT NULL, id TEXT NOT NULL,
        row TEXT, vector BLOB, columns TEXT, created_ms INTEGER NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS entries_table ON entries (table_name, seq)",
    """CREATE TABLE IF NOT EXISTS flushes (
        table_name TEXT NOT NULL, through_seq INTEGER NOT NULL, version INTEGER NOT NULL, at_ms INTEGER NOT NULL,
        PRIMARY KEY (table_name, through_seq))""",
)


def default_path(db_dir: Path) -> Path:
    return db_dir / ".memory-mcp-journal.sqlite3"


class SqliteJournal:
    """One table's entries in a shared SQLite file; thread-safe (one connection behind a lock)."""

    def __init__(self, path: Path, table: str) -> None:
        self.path = path
        self.across_machines = False
        self.where = str(path)
        self.table = table
        self._lock = threading.Lock()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            with self._transaction():
                for statement in SCHEMA:
                    self._db.execute(statement)
        except (OSError, sqlite3.Error) as exc:
            raise JournalUnavailable(f"the write journal {path} cannot be opened: {exc}") from exc
        self._group = GroupCommit(self._write, "memory-journal")

    def _transaction(self) -> _Immediate:
        return _Immediate(self._db)

    def append(self, entries: Sequence[Entry]) -> list[Entry]:
        try:
            return self._group.submit(entries).result()
        except JournalUnavailable:
            raise
        except (OSError, sqlite3.Error) as exc:
            raise JournalUnavailable(f"the write journal {self.path} refused the write ({exc}); nothing was "
                                     "written") from exc

    def _write(self, entries: list[Entry]) -> list[Entry]:
        now = int(time.time() * 1000)
        written = []
        with self._lock, self._transaction():
            for entry in entries:
                op, row, vector, columns = entry.encoded()
                cursor = self._db.execute(
                    "INSERT INTO entries (table_name, op, id, row, vector, columns, created_ms) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)", (self.table, op, entry.id, row, vector, columns, now))
                written.append(Entry(entry.op, entry.id, entry.row, entry.columns, int(cursor.lastrowid or 0), now))
        return written

    def read_after(self, seq: int, limit: int) -> list[Entry]:
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, op, id, row, vector, columns, created_ms FROM entries WHERE table_name = ? AND seq > ? "
                "ORDER BY seq LIMIT ?", (self.table, seq, limit)).fetchall()
        return [Entry.decoded(*row) for row in rows]

    def markers_after(self, through_seq: int) -> list[Marker]:
        with self._lock:
            rows = self._db.execute(
                "SELECT through_seq, version FROM flushes WHERE table_name = ? AND through_seq > ? "
                "ORDER BY through_seq",
                (self.table, through_seq)).fetchall()
        return [Marker(int(seq), int(version)) for seq, version in rows]

    def flushed(self) -> Marker:
        with self._lock:
            row = self._db.execute(
                "SELECT through_seq, version FROM flushes WHERE table_name = ? ORDER BY through_seq DESC LIMIT 1",
                (self.table,)).fetchone()
        return Marker(int(row[0]), int(row[1])) if row else Marker(0, 0)

    def mark_flushed(self, marker: Marker) -> None:
        with self._lock, self._transaction():
            self._db.execute("INSERT OR REPLACE INTO flushes (table_name, through_seq, version, at_ms) "
                             "VALUES (?, ?, ?, ?)", (self.table, marker.through_seq, marker.version,
                                                     int(time.time() * 1000)))

    def rewind(self, version: int) -> Marker:
        with self._lock, self._transaction():
            self._db.execute("DELETE FROM flushes WHERE table_name = ? AND version > ?", (self.table, version))
        return self.flushed()

    def depth(self) -> Depth:
        through = self.flushed().through_seq
        with self._lock:
            count, oldest = self._db.execute(
                "SELECT count(*), min(created_ms) FROM entries WHERE table_name = ? AND seq > ?",
                (self.table, through)).fetchone()
        return Depth(int(count), None if oldest is None else int(oldest))

    def purge(self, before_ms: int) -> int:
        through = self.flushed().through_seq
        with self._lock, self._transaction():
            gone = self._db.execute("DELETE FROM entries WHERE table_name = ? AND seq <= ? AND created_ms < ?",
                                    (self.table, through, before_ms)).rowcount
            self._db.execute("DELETE FROM flushes WHERE table_name = ? AND through_seq < ? AND at_ms < ?",
                             (self.table, through, before_ms))
        return int(gone)

    def close(self) -> None:
        self._group.close()
        with self._lock:
            self._db.close()


class _Immediate:
    """``BEGIN IMMEDIATE`` … ``COMMIT`` (``ROLLBACK`` on error): the write lock from the first statement."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: object, error: object, trace: object) -> None:
        self._db.execute("COMMIT" if kind is None else "ROLLBACK")


class FileLease:
    """Which server flushes a journal file that several on this host share, when the table has no cross-process
    write lock (object storage without a team database): an ``flock`` beside the journal, taken once and kept
    while this process lives (the kernel frees it when the process dies)."""

    def __init__(self, journal_path: Path) -> None:
        self.path = journal_path.with_name(journal_path.name + ".flusher")
        self._fd: int | None = None
        self._lock = threading.Lock()

    def held(self) -> bool:
        """Take or keep the lease; False while another process holds it, or it cannot be taken."""
        with self._lock:
            if self._fd is None:
                try:
                    fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                except OSError:
                    logger.warning("the flush lease %s cannot be opened; this server does not flush meanwhile",
                                   self.path)
                    return False
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    os.close(fd)
                    return False
                self._fd = fd
            return True

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)  # closing the only descriptor releases the flock
                self._fd = None
