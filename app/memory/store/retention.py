"""Which old versions a compaction may prune: those superseded more than ``keep`` ago, and beyond the
newest ``MAX_VERSIONS_KEPT`` those superseded more than ``READER_GRACE`` ago.

Why superseded, not created: ``optimize(cleanup_older_than=age)`` removes the versions *created* more
than ``age`` ago (never the newest) and the files no kept version uses. Creation age is not what protects
a reader: a query reads the version that was newest when it began. After a quiet spell, the version
before the first new write was created long ago yet was the newest a moment ago; a cutoff by creation age
prunes it, and the compaction that runs just before the pruning has left its data files unused, so a
query still reading it fails. Here the oldest version kept is the one that was the newest ``keep`` ago;
every version after it was the newest at some moment since.

Why a count as well: a busy team commits many versions a second, and every commit and consistent read
lists ``_versions/``, so two minutes of versions made each call slower (281 versions: about 0.6 s a
recall on S3). Beyond the newest ``MAX_VERSIONS_KEPT``, a version goes once it has not been the newest
for ``READER_GRACE``, far longer than a query reads one version.

When a version stopped being the newest is read from one clock only, so clock skew between machines
cannot prune a version a reader still needs:

- a local table: the manifests' mtimes (one machine's clock; Lance stamps a version, then writes its
  manifest: mtime >= stamp). ``prune_age`` turns the oldest version kept into the age Lance compares with
  its stamps, plus ``MARGIN`` for the compaction ``optimize`` runs before it reads its clock.
- object storage (team mode): versions are stamped by each committing instance's clock, so the stamps
  are not used at all. The instance itself notes, by its own monotonic clock, which version was the
  newest when it looked (``Sightings``); a version older than the one it saw as newest ``keep`` ago
  was superseded before that moment, whatever any clock says. The versions to prune are then named to
  Lance by number (``first_kept_seen``), with no time cutoff. An instance that has not looked long
  enough (just started) prunes nothing yet.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from app.memory.store.version_probe import manifest_version

logger = logging.getLogger(__name__)

MARGIN = timedelta(seconds=10)
MAX_VERSIONS_KEPT = 100
READER_GRACE = timedelta(seconds=10)


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


def oldest_kept(newest_at: dict[int, float] | Sightings, newest: int, now: float, keep: timedelta,
                max_versions: int = MAX_VERSIONS_KEPT, grace: timedelta = READER_GRACE) -> int:
    """The oldest version to keep: every version before it may go.

    ``newest_at``: when each version became the newest (creation times on one clock), or ``Sightings``;
    ``now`` on the same clock. Kept: the version newest ``keep`` ago and all after it, unless beyond the
    newest ``max_versions``, where only those newest within ``grace`` stay.
    """
    by_time = _newest_at(newest_at, now - keep.total_seconds())
    by_count = min(newest - max_versions + 1, _newest_at(newest_at, now - grace.total_seconds()))
    return max(by_time, by_count, 0)


def _newest_at(newest_at: dict[int, float] | Sightings, moment: float) -> int:
    """The version that was the newest at ``moment`` (0: none known that early)."""
    if isinstance(newest_at, Sightings):
        return newest_at.newest_at(moment)
    return max((v for v, t in newest_at.items() if t <= moment), default=0)


def prune_age(versions_dir: Path | None, keep: timedelta, *, table: Any | None = None, now: float | None = None,
              margin: timedelta | None = None, max_versions: int = MAX_VERSIONS_KEPT,
              grace: timedelta = READER_GRACE) -> timedelta:
    """The ``cleanup_older_than`` that prunes only the versions before ``oldest_kept``: timed by the
    manifests' mtimes in a local ``versions_dir``, else by ``table``'s version list."""
    margin = MARGIN if margin is None else margin
    if versions_dir is not None:
        created = manifest_times(versions_dir)
    else:
        created = commit_times(table) if table is not None else {}
    now = time.time() if now is None else now
    if not created:
        return keep + margin
    first = oldest_kept(created, max(created), now, keep, max_versions, grace)
    if first not in created:  # every version is younger than the window
        return keep + margin
    return timedelta(seconds=max(0.0, now - created[first])) + margin


def first_kept_seen(newest: int, sightings: Sightings, keep: timedelta, max_versions: int = MAX_VERSIONS_KEPT,
                    grace: timedelta = READER_GRACE, now: float | None = None) -> int:
    """The oldest version to keep on object storage, ``newest`` being the table's newest now (noted in
    ``sightings`` first); every version before it may be pruned, named by number."""
    moment = time.monotonic() if now is None else now
    sightings.saw(newest, moment)
    return oldest_kept(sightings, newest, moment, keep, max_versions, grace)


class Sightings:
    """Which version this instance saw as the newest, when (its monotonic clock): a record no other
    machine's clock enters. Thread-safe; keeps the last ``limit`` sightings."""

    def __init__(self, limit: int = 4096) -> None:
        self._times: list[float] = []
        self._versions: list[int] = []
        self._limit = limit
        self._lock = threading.Lock()

    def saw(self, version: int, now: float | None = None) -> None:
        moment = time.monotonic() if now is None else now
        with self._lock:
            if self._versions and version <= self._versions[-1]:
                return  # nothing newer: the earlier sighting of it (or a newer one) says more
            self._times.append(moment)
            self._versions.append(version)
            if len(self._times) > self._limit:
                del self._times[0], self._versions[0]

    def newest_at(self, moment: float) -> int:
        """The newest version seen at or before ``moment`` (0: nothing seen that early)."""
        with self._lock:
            at = bisect.bisect_right(self._times, moment)
            return self._versions[at - 1] if at else 0
