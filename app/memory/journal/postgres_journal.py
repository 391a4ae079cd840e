"""The journal in team mode: two tables in the PostgreSQL database the board uses, shared by every instance.

Appends take a transaction-level advisory lock per table, so sequence numbers are handed out in commit
order and every instance that reads ``seq > n`` sees a gap-free run. The flusher lease is a session-level
advisory lock on a connection of its own (``FlushLease``): one instance folds the journal into the
table, and when it dies its session ends and another takes over at its next try.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from app.memory.errors import JournalUnavailable
from app.memory.journal.base import Depth, GroupCommit, Marker
from app.memory.journal.entries import Entry

logger = logging.getLogger(__name__)

POOL_MAX = 4
CONNECT_TIMEOUT_S = 3
POOL_TIMEOUT_S = 2.0  # a journal that does not answer fails the write at once: 503, retried by the client
SCHEMA = (
    """CREATE TABLE IF NOT EXISTS memory_mcp_journal (
        seq BIGSERIAL PRIMARY KEY, table_key TEXT NOT NULL, op TEXT NOT NULL, id TEXT NOT NULL,
        row_json TEXT, vector BYTEA, columns TEXT, created_ms BIGINT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS memory_mcp_journal_table ON memory_mcp_journal (table_key, seq)",
    """CREATE TABLE IF NOT EXISTS memory_mcp_journal_flushes (
        table_key TEXT NOT NULL, through_seq BIGINT NOT NULL, version BIGINT NOT NULL, at_ms BIGINT NOT NULL,
        PRIMARY KEY (table_key, through_seq))""",
)
_NOW_MS = "(extract(epoch from clock_timestamp()) * 1000)::bigint"


def redacted(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{parts.netloc.rsplit('@', 1)[-1]}"))


def lock_key(table_key: str, purpose: str) -> int:
    """A stable signed 64-bit advisory lock key for one table and purpose."""
    digest = hashlib.sha256(f"memory-mcp:{purpose}:{table_key}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class PostgresJournal:
    """One table's entries (``table_key``: where the table lives and its name) in a shared database."""

    def __init__(self, url: str, table_key: str) -> None:
        self.url = url
        self.across_machines = True
        self.where = redacted(url)
        self.table_key = table_key
        self._append_key = lock_key(table_key, "append")
        self._pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            url, min_size=1, max_size=POOL_MAX, open=False, timeout=POOL_TIMEOUT_S, name="memory-journal",
            kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_S})
        try:
            self._pool.open(wait=True, timeout=CONNECT_TIMEOUT_S * 2)
            with self._connection() as conn, conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key("schema", "schema"),))
                for statement in SCHEMA:
                    conn.execute(statement)  # type: ignore[call-overload]
        except JournalUnavailable:
            self._pool.close()
            raise
        except (PoolTimeout, psycopg.Error) as exc:
            self._pool.close()
            raise JournalUnavailable(f"the write journal database {self.where} does not answer: {exc}") from exc
        self._group = GroupCommit(self._write, "memory-journal")

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        try:
            with self._pool.connection() as conn:
                yield conn
        except (PoolTimeout, psycopg.OperationalError) as exc:
            raise JournalUnavailable(f"the write journal database {self.where} is unavailable ({exc}); nothing "
                                     "was written") from exc

    def append(self, entries: Sequence[Entry]) -> list[Entry]:
        return self._group.submit(entries).result()

    def _write(self, entries: list[Entry]) -> list[Entry]:
        written = []
        with self._connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._append_key,))
            for entry in entries:
                op, row, vector, columns = entry.encoded()
                seq, created = conn.execute(
                    "INSERT INTO memory_mcp_journal (table_key, op, id, row_json, vector, columns, created_ms) "
                    f"VALUES (%s, %s, %s, %s, %s, %s, {_NOW_MS}) RETURNING seq, created_ms",
                    (self.table_key, op, entry.id, row, vector, columns)).fetchone()
                written.append(Entry(entry.op, entry.id, entry.row, entry.columns, int(seq), int(created)))
        return written

    def read_after(self, seq: int, limit: int) -> list[Entry]:
        with self._connection() as conn:
            rows = conn.execute(
                "SELECT seq, op, id, row_json, vector, columns, created_ms FROM memory_mcp_journal "
                "WHERE table_key = %s AND seq > %s ORDER BY seq LIMIT %s", (self.table_key, seq, limit)).fetchall()
        return [Entry.decoded(*row) for row in rows]

    def markers_after(self, through_seq: int) -> list[Marker]:
        with self._connection() as conn:
            rows = conn.execute(
                "SELECT through_seq, version FROM memory_mcp_journal_flushes WHERE table_key = %s AND through_seq > %s "
                "ORDER BY through_seq", (self.table_key, through_seq)).fetchall()
        return [Marker(int(seq), int(version)) for seq, version in rows]

    def flushed(self) -> Marker:
        with self._connection() as conn:
            row = conn.execute(
                "SELECT through_seq, version FROM memory_mcp_journal_flushes WHERE table_key = %s "
                "ORDER BY through_seq DESC LIMIT 1", (self.table_key,)).fetchone()
        return Marker(int(row[0]), int(row[1])) if row else Marker(0, 0)

    def mark_flushed(self, marker: Marker) -> None:
        with self._connection() as conn:
            conn.execute(
                "INSERT INTO memory_mcp_journal_flushes (table_key, through_seq, version, at_ms) "
                f"VALUES (%s, %s, %s, {_NOW_MS}) ON CONFLICT (table_key, through_seq) DO UPDATE SET version = "
                "EXCLUDED.version", (self.table_key, marker.through_seq, marker.version))

    def rewind(self, version: int) -> Marker:
        with self._connection() as conn:
            conn.execute("DELETE FROM memory_mcp_journal_flushes WHERE table_key = %s AND version > %s",
                         (self.table_key, version))
        return self.flushed()

    def depth(self) -> Depth:
        through = self.flushed().through_seq
        with self._connection() as conn:
            count, oldest = conn.execute(
                "SELECT count(*), min(created_ms) FROM memory_mcp_journal WHERE table_key = %s AND seq > %s",
                (self.table_key, through)).fetchone()
        return Depth(int(count), None if oldest is None else int(oldest))

    def purge(self, before_ms: int) -> int:
        through = self.flushed().through_seq
        with self._connection() as conn, conn.transaction():
            gone = conn.execute("DELETE FROM memory_mcp_journal WHERE table_key = %s AND seq <= %s AND created_ms < %s",
                                (self.table_key, through, before_ms)).rowcount
            conn.execute("DELETE FROM memory_mcp_journal_flushes WHERE table_key = %s AND through_seq < %s "
                         "AND at_ms < %s", (self.table_key, through, before_ms))
        return int(gone)

    def close(self) -> None:
        self._group.close()
        self._pool.close()


class FlushLease:
    """Whether this instance is the one that flushes: a session advisory lock on a connection of its own."""

    def __init__(self, url: str, table_key: str) -> None:
        self._url = url
        self._key = lock_key(table_key, "flush")
        self._conn: psycopg.Connection[Any] | None = None
        self._holding = False
        self._lock = threading.Lock()

    def held(self) -> bool:
        """Take or keep the lease; False when another instance holds it or the database does not answer.

        A held lease is checked by a round trip on its session: a session that ended (the database
        restarted, the network dropped it) released the lock, and this instance must not flush on it."""
        with self._lock:
            try:
                if self._conn is None or self._conn.closed:
                    self._holding = False
                    self._conn = psycopg.connect(self._url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
                if self._holding:
                    self._conn.execute("SELECT 1")
                    return True
                row = self._conn.execute("SELECT pg_try_advisory_lock(%s)", (self._key,)).fetchone()
                self._holding = bool(row and row[0])
                return self._holding
            except psycopg.Error:
                logger.warning("the flush lease could not be checked; this instance does not flush meanwhile")
                self._drop()
                return False

    def close(self) -> None:
        with self._lock:
            self._drop()

    def _drop(self) -> None:
        self._holding = False
        if self._conn is not None:
            with suppress(psycopg.Error):
                self._conn.close()
            self._conn = None
