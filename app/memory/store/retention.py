"""How old a version must be before a compaction may prune it: every version that was the newest at
some moment of the last ``keep`` stays.

Why: ``optimize(cleanup_older_than=age)`` removes the versions *created* more than ``age`` ago (never
the newest) and the files no kept version uses. Creation age is not what protects a reader: a query
reads the version that was newest when it began. After a quiet spell, the version before the first new
write was created long ago yet was the newest a moment ago; a cutoff by creation age prunes it, and the
compaction that runs just before the pruning has left its data files unused, so a query still reading
it fails. Here the age handed to Lance reaches back to the creation of the version that was the newest
``keep`` ago; every version after it was the newest at some moment since, and stays.

Creation times are the manifests' mtimes (Lance stamps a version, then writes its manifest: mtime >=
stamp). ``MARGIN`` covers the time between this reading and Lance's own clock reading, which comes after
the compaction that ``optimize`` runs first (a few seconds at 100k rows; docs/performance.md, 'Compaction
and tail merges'). A compaction longer than the margin only shortens the window by the difference.

On object storage there is no directory to stat, and the same rule runs on the commit times LanceDB's
``list_versions`` reports (each stamped by the committing instance's clock, the clock Lance's own
cutoff is compared with; instances' clocks must agree within the margin, as NTP keeps them). Where
neither can be read, only ``keep`` is applied, plus the margin.
"""

from __future__ import annotations

import logging
import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from app.memory.store.version_probe import manifest_version

logger = logging.getLogger(__name__)

MARGIN = timedelta(seconds=10)


def versions_dir(db_path: Path | str, table: str) -> Path | None:
    """Where a local table keeps its manifests; None for an object-store URI (a str)."""
    return db_path / f"{table}.lance" / "_versions" if isinstance(db_path, Path) else None


def commit_times(table: Any) -> dict[int, float]:
    """Version -> its commit time (seconds since the epoch), from LanceDB's version list (any store)."""
    try:
        versions = table.list_versions()
    except Exception:  # noqa: BLE001 - no list, no window: prune_age falls back to keep + margin
        logger.exception("listing the table's versions failed; pruning by creation age only")
        return {}
    return {int(v["version"]): float(v["timestamp"].timestamp()) for v in versions}


def manifest_times(versions_dir: Path | None) -> dict[int, float]:
    """Version -> its manifest's mtime (seconds since the epoch) for every manifest in the directory."""
    if versions_dir is None:
        return {}
    times: dict[int, float] = {}
    try:
        with os.scandir(versions_dir) as entries:
            for entry in entries:
                version = manifest_version(entry.name)
                if version is None:
                    continue
                try:
                    times[version] = entry.stat().st_mtime
                except FileNotFoundError:  # pruned while we listed
                    continue
    except OSError:
        return {}
    return times


def prune_age(versions_dir: Path | None, keep: timedelta, *, table: Any | None = None, now: float | None = None,
              margin: timedelta | None = None) -> timedelta:
    """The ``cleanup_older_than`` that prunes only versions superseded more than ``keep`` ago: timed by
    the manifests' mtimes in a local ``versions_dir``, else by ``table``'s version list."""
    margin = MARGIN if margin is None else margin
    if versions_dir is not None:
        created = manifest_times(versions_dir)
    else:
        created = commit_times(table) if table is not None else {}
    now = time.time() if now is None else now
    window_start = now - keep.total_seconds()
    before = [(version, mtime) for version, mtime in created.items() if mtime <= window_start]
    if not before:  # every version is younger than the window (or none could be listed)
        return keep + margin
    _, newest_then = max(before)  # the version that was the newest when the window began
    return max(keep, timedelta(seconds=now - newest_then)) + margin
