"""Where the table lives: a local directory or an object store (team mode), and what guards its commits.

Every LanceDB connection of the package is made here, so the storage options reach each one (an
export, a tail merge's look at past versions, the doctor) and none falls back to a local path.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import lancedb

from app.memory.store.locks import CommitLock, ProcessLock, WriteLock
from app.settings import Settings


def connect(settings: Settings, *, consistent: bool = True, session: Any | None = None) -> Any:
    """A LanceDB connection to ``settings.db_uri``; ``consistent``: every read sees other writers' commits.

    Raises:
        OSError / ValueError from LanceDB: the store cannot be reached (bucket missing, no credentials).
    """
    return lancedb.connect(
        settings.db_uri,
        read_consistency_interval=timedelta(0) if consistent else None,
        storage_options=dict(settings.storage_options) or None,
        session=session,
    )


def commit_lock(settings: Settings) -> CommitLock:
    """The cross-process lock of a local directory; on object storage only this process's threads are
    ordered by a lock, and LanceDB's conditional-put commits order the instances."""
    if settings.db_dir is not None:
        return WriteLock(settings.db_dir, settings.lock_timeout_s)
    return ProcessLock(settings.lock_timeout_s)


def table_exists(db: Any, name: str) -> bool:
    """Whether the connection holds the table (one listing, no directory probe: works on any store)."""
    try:
        db.open_table(name)
    except (FileNotFoundError, ValueError):
        return False
    return True
