"""The Lance file format of the shared table: one memory-lancedb-pro's LanceDB can read, and the rewrite
of a table it cannot.

memory-lancedb-pro pins ``@lancedb/lancedb`` 0.26, which creates its tables in Lance format 2.0 and
panics reading a 2.2 file (LanceDB 0.40's default) on any scalar column. So tables are created in 2.0,
as the plugin creates its own, and ``rewrite`` turns a table an earlier memory-mcp created in 2.2 into
2.0 as one new version of the same table: ids, vectors, metadata and extra columns kept, the directory
copied to ``<db>/backups/`` first, other writers held off by the write lock meanwhile.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa

from app.memory.store.locks import CommitLock

logger = logging.getLogger(__name__)

PLUGIN_FORMAT = "2.0"
# "0.1" / "legacy" is Lance's first format, which every LanceDB reads.
PLUGIN_READABLE = frozenset({"0.1", "legacy", "2.0", "2.1"})
BACKUP_DIR = "backups"


def create(db: Any, name: str, schema: pa.Schema, storage_options: dict[str, str] | None = None) -> Any:
    """Create the table in the plugin's format (``exist_ok``: another creator may have been first);
    ``storage_options``: the connection's, which table-level options would otherwise replace."""
    options = {**(storage_options or {}), "new_table_data_storage_version": PLUGIN_FORMAT}
    return db.create_table(name, schema=schema, exist_ok=True, storage_options=options)


def storage_version(uri: str, storage_options: dict[str, str] | None = None) -> str:
    """The table's Lance file format, e.g. ``"2.0"``."""
    return str(lance.dataset(uri, storage_options=storage_options or None).data_storage_version)


def plugin_reads(version: str) -> bool:
    return version in PLUGIN_READABLE


@dataclass(frozen=True)
class Rewrite:
    """What ``rewrite`` did: the formats before and after, the rows, and where the backup is."""

    before: str
    after: str
    rows: int
    version: int
    backup: Path | None


def rewrite(uri: str, lock: CommitLock, backup_root: Path | None,
            storage_options: dict[str, str] | None = None) -> Rewrite:
    """Rewrite the table at ``uri`` in ``PLUGIN_FORMAT`` unless the plugin reads it already.

    Under ``lock`` for the whole rewrite; the local table directory is copied to ``backup_root`` first
    (on object storage the previous version stays in the table's history). The new version is checked
    against the old one (ids and vectors) before the lock is released.

    Raises:
        RuntimeError: the rewritten version differs from the original (the old version stays restorable).
    """
    with lock.hold():
        old = lance.dataset(uri, storage_options=storage_options or None)
        before = str(old.data_storage_version)
        if plugin_reads(before):
            return Rewrite(before, before, old.count_rows(), old.version, None)
        backup = None
        if backup_root is not None:
            stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
            backup = backup_root / BACKUP_DIR / f"{Path(uri).stem}-v{old.version}-{stamp}.lance"
            shutil.copytree(uri, backup)
        reader = old.scanner(batch_size=4096).to_reader()  # streamed: a large table never sits in memory
        new = lance.write_dataset(reader, uri, schema=old.schema, mode="overwrite",
                                  data_storage_version=PLUGIN_FORMAT, storage_options=storage_options or None)
        _check_same_rows(old, new)
        logger.warning("rewrote the memory table %s from Lance format %s to %s (%d rows, version %d); backup: %s",
                       uri, before, PLUGIN_FORMAT, new.count_rows(), new.version, backup or "the previous version")
        return Rewrite(before, str(new.data_storage_version), new.count_rows(), new.version, backup)


def _check_same_rows(old: Any, new: Any) -> None:
    columns = [c for c in ("id", "vector") if c in old.schema.names]
    before, after = old.to_table(columns=columns), new.to_table(columns=columns)
    if "id" in columns:
        before, after = before.sort_by("id"), after.sort_by("id")
    if not before.equals(after):
        raise RuntimeError(f"the rewrite's ids or vectors differ from the table's ({after.num_rows} rows written, "
                           f"{before.num_rows} read)")
