"""What the board's stores need from a database, and the choice between SQLite and PostgreSQL.

The stores (``TaskStore``, ``JobRecords``) write their SQL once, with ``?`` placeholders and
statements both databases run the same way; a backend gives them transactions and says how to lock
a row it is about to change. SQLite (a file path) is the default; ``postgresql://`` puts the board
of every instance in one PostgreSQL database.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from app.settings import Settings


class Rows(Protocol):
    """A cursor after ``execute``: rows are mappings by column name."""

    rowcount: int

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    def execute(self, sql: str, params: Sequence[Any] = ...) -> Rows: ...


Row = Mapping[str, Any]


class BoardDatabase(Protocol):
    """One board's database: transactions, a change marker, migrations."""

    #: Where the board lives, fit for logs and /health (a URL without its password).
    location: str
    #: Appended to a SELECT of a row the transaction will change: PostgreSQL's ``FOR UPDATE``, "" on SQLite.
    lock_clause: str

    def write(self) -> AbstractContextManager[Connection]:
        """A transaction that holds the board's write lock from its start; committed on success."""

    def read(self) -> AbstractContextManager[Connection]:
        """A read-only transaction: its SELECTs see one snapshot."""

    def change_marker(self) -> int:
        """A number that changes whenever any process commits to the board."""

    def migrate(self) -> int:
        """Bring the schema to the newest version; safe when several processes start at once."""

    def close(self) -> None: ...


def open_database(settings: Settings) -> BoardDatabase:
    """The configured board database, not yet migrated."""
    if settings.kanban_db_url is not None:
        from app.kanban.postgres import PostgresDatabase

        return PostgresDatabase(settings.kanban_db_url)
    from app.kanban.db import Database

    return Database(settings.kanban_db_path)
