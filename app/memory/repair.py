"""Damage to the shared table that no start-up recovery sees, and its repair (``memory-mcp repair``,
``doctor --fix``).

Another process can leave the table's newest version naming data files that are not there: a
``drop_table`` racing our flush deletes the files it listed, then fails because ours landed meanwhile; a
careless cleanup deletes a data file. Every full read then fails, for the plugin too. ``damage`` finds it
(each fragment's data and deletion files stat'ed: milliseconds at thousands of fragments); the flusher
looks after a failed flush and every ``CHECK_EVERY_S``, and while the table is damaged it stops committing:
writes wait in the journal, reads answer from the index, ``/readyz`` answers 503 ``table_damaged``.

``repair`` copies the table directory to ``<db>/backups/`` first, then, under the write lock: finds the
newest version whose files are all there, restores it (a new version, the damaged ones kept as history),
appends the rows of the newer versions' fragments that can still be read and that it lacks, and forgets
the journal's flushes recorded past the version it restored, so the server flushes memory-mcp's writes of
those versions again. With no readable version left, the directory is moved aside whole and the next server
start creates the table afresh, the journal refilling it with what it kept (an hour of writes).
Local tables only: an object store neither loses a file under a live manifest nor has our lock.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from app.settings import Settings

logger = logging.getLogger(__name__)

CHECK_EVERY_S = 30.0  # how often a running flusher looks for damage when nothing failed


@dataclass
class RepairReport:
    backup: Path | None = None
    damaged_version: int | None = None
    restored_version: int | None = None
    salvaged_rows: int = 0
    rewound_to: int | None = None
    moved_aside: bool = False
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        if self.moved_aside:
            return (f"no readable version was left: the table was moved to {self.backup}; the next server start "
                    f"creates it afresh and flushes the journal's writes into it")
        if self.restored_version is None:
            return "the table is whole: nothing to repair"
        return (f"version {self.damaged_version} was damaged; restored version {self.restored_version}, "
                f"{self.salvaged_rows} row(s) salvaged from the newer fragments, the journal's writes since flushed "
                f"again; a copy of the damaged table is at {self.backup}")


def table_dir(settings: Settings) -> Path | None:
    return None if settings.db_dir is None else settings.db_dir / f"{settings.table}.lance"


def _missing(dataset: Any, root: Path) -> list[str]:
    """The data and deletion files ``dataset``'s manifest names that are not on disk."""
    missing = []
    for fragment in dataset.get_fragments():
        metadata = fragment.metadata
        paths = [root / "data" / data_file.path for data_file in fragment.data_files()]
        if metadata.deletion_file is not None:
            paths.append(root / str(metadata.deletion_file.path(int(metadata.id))))
        missing += [str(path.relative_to(root)) for path in paths if not path.exists()]
    return missing


def damage(settings: Settings) -> str | None:
    """What is wrong with the table's newest version, or None when it can be read whole (or is not local,
    or does not exist yet)."""
    import lance

    root = table_dir(settings)
    if root is None or not root.exists():
        return None
    if not (root / "_versions").is_dir():
        return f"{root} has no _versions directory: the table was deleted under a writer"
    try:
        dataset = lance.dataset(str(root))
    except Exception as exc:  # noqa: BLE001 - any failure to open is the damage reported
        return f"the newest version of {root} cannot be opened ({_first_line(exc)})"
    missing = _missing(dataset, root)
    if missing:
        return (f"version {dataset.version} of {root} names {len(missing)} file(s) that do not exist "
                f"({', '.join(missing[:3])}{' …' if len(missing) > 3 else ''})")
    return None


def _newest_whole(root: Path) -> tuple[Any, int] | None:
    """The newest version that opens with all its files, and the newest version number."""
    import lance

    from app.memory.store.recovery import list_manifests

    manifests = list_manifests(root / "_versions")
    for manifest in manifests:
        try:
            dataset = lance.dataset(str(root), version=manifest.version)
        except Exception:  # noqa: BLE001 - an unreadable version: look further back
            continue
        if not _missing(dataset, root):
            return dataset, manifests[0].version
    return None


def _salvage(root: Path, good: Any, newest: int) -> pa.Table | None:
    """Rows of the versions after ``good`` whose fragments can still be read, and that ``good`` lacks."""
    import lance

    known = set(good.to_table(columns=["id"]).column("id").to_pylist())
    found: dict[str, dict[str, Any]] = {}
    for version in range(newest, good.version, -1):
        try:
            dataset = lance.dataset(str(root), version=version)
        except Exception:  # noqa: BLE001 - a version that does not open has nothing to give
            continue
        for fragment in dataset.get_fragments():
            paths = [root / "data" / f.path for f in fragment.data_files()]
            if not all(path.exists() for path in paths):
                continue
            try:
                rows = fragment.to_table().to_pylist()
            except Exception:  # noqa: BLE001 - an unreadable fragment is skipped
                continue
            for row in rows:
                if row.get("id") is not None and row["id"] not in known:
                    found.setdefault(str(row["id"]), row)  # the newest version's copy first
    if not found:
        return None
    return pa.Table.from_pylist(list(found.values()), schema=good.schema)


def repair(settings: Settings) -> RepairReport:
    """Bring a damaged local table back (see the module docstring); blocking.

    Raises:
        ValueError: the table is on object storage.
    """
    from app.memory.journal.writer import open_journal
    from app.memory.store.locks import WriteLock

    root = table_dir(settings)
    if root is None or settings.db_dir is None:
        raise ValueError("repair works on a local table; an object store is repaired by its own tools")
    report = RepairReport()
    problem = damage(settings)
    if problem is None:
        return report
    report.notes.append(problem)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    backups = settings.db_dir / "backups"
    backups.mkdir(exist_ok=True)
    if (root / "_versions").is_dir():
        from app.memory.store.recovery import quarantine_torn_head

        torn = quarantine_torn_head(settings)  # a commit would read the torn head, so it goes first
        report.notes += [f"version {version}'s manifest was torn: moved to {root.parent / 'quarantine'}"
                         for version in torn]
    with WriteLock(settings.db_dir, settings.lock_timeout_s).hold():
        report.backup = backups / f"{settings.table}-damaged-{stamp}.lance"
        found = _newest_whole(root) if (root / "_versions").is_dir() else None
        if found is None:
            shutil.move(str(root), report.backup)
            report.moved_aside = True
            rewind_to = 0
        else:
            shutil.copytree(root, report.backup)
            good, newest = found
            report.damaged_version, report.restored_version = newest, int(good.version)
            salvaged = _salvage(root, good, newest)
            good.restore()  # the good version becomes the newest, as a new version
            import lance

            lance.dataset(str(root))
            if salvaged is not None:
                lance.write_dataset(salvaged, str(root), mode="append")
                report.salvaged_rows = salvaged.num_rows
            rewind_to = report.restored_version
            os.sync()
        journal, lease = open_journal(settings)
        try:
            report.rewound_to = journal.rewind(rewind_to).through_seq
        finally:
            journal.close()
            if lease is not None:
                lease.close()
    logger.warning("memory table %s repaired: %s", root, report.summary())
    return report


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
