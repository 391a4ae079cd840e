"""The board on SQLite (the default backend): one connection per thread, WAL, busy timeout, versioned migrations.

Every change runs in ``BEGIN IMMEDIATE`` so that the write lock is taken before anything is read:
two processes allocating an id or claiming a card serialise on the database, not in Python.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

BUSY_TIMEOUT_MS = 10_000

# Each entry is one schema version; statements run one by one inside a single transaction
# (``executescript`` would commit on its own and break the all-or-nothing upgrade).
MIGRATIONS: list[list[str]] = [
    [
        "CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
        "INSERT INTO counters (name, value) VALUES ('task', 0)",
        """CREATE TABLE tasks (
            id TEXT PRIMARY KEY, seq INTEGER NOT NULL UNIQUE, title TEXT NOT NULL,
            description TEXT NOT NULL DEFAULT '', assignee TEXT NOT NULL, status TEXT NOT NULL,
            steps TEXT NOT NULL DEFAULT '[]', current_step INTEGER, priority TEXT,
            tags TEXT NOT NULL DEFAULT '[]', created_ms INTEGER NOT NULL, updated_ms INTEGER NOT NULL,
            retry_count INTEGER NOT NULL DEFAULT 0, position INTEGER NOT NULL DEFAULT 0,
            extra TEXT NOT NULL DEFAULT '{}')""",
        "CREATE INDEX tasks_status ON tasks (status, position)",
        """CREATE TABLE notes (
            id INTEGER PRIMARY KEY AUTOINCREMENT, task_id TEXT NOT NULL REFERENCES tasks(id),
            author TEXT, text TEXT NOT NULL, created_ms INTEGER NOT NULL)""",
        "CREATE INDEX notes_task ON notes (task_id, id)",
        """CREATE TABLE history (
            id INTEGER PRIMARY KEY AUTOINCREMENT, task_id TEXT NOT NULL REFERENCES tasks(id),
            from_status TEXT, to_status TEXT NOT NULL, actor TEXT, at_ms INTEGER NOT NULL)""",
        "CREATE INDEX history_task ON history (task_id, id)",
        """CREATE TABLE jobs (
            id TEXT PRIMARY KEY, task_id TEXT, argv TEXT NOT NULL, status TEXT NOT NULL,
            exit_code INTEGER, started_ms INTEGER NOT NULL, ended_ms INTEGER, pid INTEGER, pgid INTEGER,
            stdout TEXT NOT NULL DEFAULT '', stderr TEXT NOT NULL DEFAULT '',
            stdout_bytes INTEGER NOT NULL DEFAULT 0, stderr_bytes INTEGER NOT NULL DEFAULT 0,
            truncated INTEGER NOT NULL DEFAULT 0, reason TEXT, actor TEXT)""",
        "CREATE INDEX jobs_task ON jobs (task_id, started_ms)",
        "CREATE INDEX jobs_status ON jobs (status)",
        "CREATE TABLE board_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    ],
    # The server process that started a job (job_records.server_identity), so a start-up marks only
    # the jobs of dead servers abandoned, not those of another live server on the same board.
    ["ALTER TABLE jobs ADD COLUMN server TEXT"],
]
SCHEMA_VERSION = len(MIGRATIONS)


class Database:
    """Thread-safe access to one SQLite file; each thread gets its own connection."""

    #: ``BEGIN IMMEDIATE`` already holds the whole file's write lock: a row needs no lock of its own.
    lock_clause = ""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.location = str(path)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: list[sqlite3.Connection] = []
        self._closed = False
        self._watcher: sqlite3.Connection | None = None
        self._watcher_lock = threading.Lock()

    def connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
        return conn

    def _connect(self) -> sqlite3.Connection:
        with self._lock:
            if self._closed:
                raise RuntimeError("kanban database is closed")
            # isolation_level=None: we issue BEGIN/COMMIT ourselves (the stdlib default would not
            # take the write lock up front).
            conn = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
            )
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA foreign_keys = ON")
            self._connections.append(conn)
            return conn

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """A ``BEGIN IMMEDIATE`` transaction: committed on success, rolled back on any error."""
        conn = self.connection()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A read transaction, so that several SELECTs see one snapshot."""
        conn = self.connection()
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            conn.execute("COMMIT")

    def data_version(self) -> int:
        """SQLite's ``PRAGMA data_version`` on a connection of its own that never writes.

        The number changes whenever any other connection, in this process or another, commits, so
        it tells a watcher that the board changed without reading a row.
        """
        with self._watcher_lock:
            if self._watcher is None:
                self._watcher = self._connect()
            return int(self._watcher.execute("PRAGMA data_version").fetchone()[0])

    def change_marker(self) -> int:
        return self.data_version()

    def migrate(self) -> int:
        """Bring the schema to ``SCHEMA_VERSION``; safe when several processes start at once."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.write() as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = conn.execute("SELECT version FROM schema_version").fetchone()
            version = int(row["version"]) if row else 0
            if version > SCHEMA_VERSION:
                raise RuntimeError(
                    f"{self.path} has schema version {version}, newer than this program ({SCHEMA_VERSION})"
                )
            for statements in MIGRATIONS[version:]:
                for statement in statements:
                    conn.execute(statement)
            if row is None:
                conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
            else:
                conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION,))
        return SCHEMA_VERSION

    def close(self) -> None:
        with self._lock:
            self._closed = True
            connections, self._connections = self._connections, []
        for conn in connections:
            conn.close()
