"""Which version the table is at, read off its ``_versions`` directory instead of asking LanceDB.

Why: the vector cache must see every commit acknowledged before a search was submitted, other
processes' included, so the search thread checks the table version once per batch. With a zero
read-consistency interval that is a LanceDB call through its background event loop: cheap alone, but
milliseconds under load (concurrent recalls, or remembers whose duplicate checks wait on it), while
reading the files takes microseconds (docs/performance.md, 'Version reads').

Two shortcuts, each falling back to LanceDB when it cannot be sure:

- Every commit, compaction or version cleanup adds or removes a manifest in ``<table>.lance/_versions``,
  which changes that directory's mtime. While (inode, mtime) is what it was at the last answer, the
  answer still holds. The kernel stamps mtimes from a coarse clock (a few ms), so two changes close
  together can leave the same stamp: a stamp is only trusted once it is older than ``QUIET_NS``.
- When the directory did change, the version is read from the files. Lance names each manifest
  ``{2**64 - 1 - version}.manifest`` (its V2 naming) and, after each commit, writes the version to
  ``latest_version_hint.json``. A manifest appears under its final name only once whole (it is renamed
  into place) and before the commit is acknowledged, so starting at the hint and stepping up while the
  next manifest exists gives the newest acknowledged version even when the hint lags. Missing or
  unreadable hint, a hinted manifest that is not there (V1 naming, or a cleanup racing us): ask LanceDB.

Tables not on a local disk (object storage) have no such directory and are always asked.

The probe also tells a new table from the old one: another process may drop the table and create it
again, and the new one counts its versions from 1. A version number is then no identity: the cache or
an append handle at version 7 would take the new table's version 7 for its own (and an append would
commit the dropped table's files onto it). So each answer also compares the inodes of the table and
version directories, the version number with the highest seen, and the manifest file of the last
version seen with what it was (the kernel reuses a dropped table's inodes, but never for a file with
the same mtime); a change calls ``on_new_table`` once, under the probe's lock, before any caller gets
the new version.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

QUIET_NS = 50_000_000  # far above any coarse-clock tick (1-10 ms)
HINT_FILE = "latest_version_hint.json"
_U64_MAX = 2**64 - 1
_V2_FLOOR = 2**63  # V2 names count down from 2**64 - 1; V1 names are the version itself
_MAX_STEPS = 10_000  # a hint this far behind is not worth stepping through; LanceDB lists instead


def manifest_name(version: int) -> str:
    """The file Lance's V2 naming gives ``version``: names sort newest first."""
    return f"{_U64_MAX - version}.manifest"


def manifest_version(name: str) -> int | None:
    """The version a manifest file's name stands for, in V2 naming or V1 (the version itself); None for
    any other file."""
    stem, dot, suffix = name.partition(".")
    if suffix != "manifest" or not dot or not stem.isdigit():
        return None
    number = int(stem)
    return _U64_MAX - number if number >= _V2_FLOOR else number


def read_latest(versions_dir: Path) -> int | None:
    """The newest version whose manifest is in ``versions_dir``, or None when the files cannot tell."""
    try:
        hinted = json.loads((versions_dir / HINT_FILE).read_bytes())["version"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(hinted, int) or isinstance(hinted, bool) or not 0 < hinted < _U64_MAX:
        return None
    base = os.fspath(versions_dir) + os.sep
    if not os.path.exists(base + manifest_name(hinted)):
        return None
    version = hinted
    for _ in range(_MAX_STEPS):
        if not os.path.exists(base + manifest_name(version + 1)):
            return version
        version += 1
    return None


class VersionProbe:
    """``current()`` = the table's version: cached while the directory is quiet, else from its files,
    else ``read()`` (LanceDB)."""

    def __init__(self, versions_dir: Path | None, read: Callable[[], int], *, quiet_ns: int = QUIET_NS,
                 on_new_table: Callable[[str], None] | None = None) -> None:
        self.versions_dir = versions_dir if versions_dir is not None and versions_dir.is_dir() else None
        self._read = read
        self.quiet_ns = quiet_ns
        self.on_new_table = on_new_table
        self._lock = threading.RLock()  # held through ``on_new_table``: no reader sees the new table before it ran
        self._stamp: tuple[int, int] | None = None
        self._version = 0
        self._highest = 0
        self._identity = self._inodes()
        # A version and its manifest's (inode, mtime): inodes of a dropped table are reused by the next
        # files created, but a new table's manifest of the same version is another file, written later.
        self._known: tuple[int, tuple[int, int]] | None = None
        self.reads = 0  # answers from LanceDB
        self.file_reads = 0  # answers from the directory's files

    def current(self) -> int:
        stamp = self._stat()
        with self._lock:
            if stamp is not None and stamp == self._stamp:
                return self._version
        # Stat first, then read: a commit landing in between changes the stamp, so the next call
        # reads again; the reverse order could pair an old version with the new stamp.
        version = read_latest(self.versions_dir) if self.versions_dir is not None else None
        if version is not None:
            self.file_reads += 1
        else:
            version = self._read()
            self.reads += 1
        identity = self._inodes()
        with self._lock:
            quiet = stamp is not None and time.time_ns() - stamp[1] > self.quiet_ns
            self._stamp, self._version = (stamp if quiet else None), version
            reason = None
            if identity is not None and self._identity is not None and identity != self._identity:
                reason = f"its directory was made anew (now at version {version})"
            elif version < self._highest:
                reason = f"its version went back from {self._highest} to {version}"
            elif self._known is not None and self._manifest_mark(self._known[0]) not in (None, self._known[1]) \
                    and not self._torn(self._known[0]):  # a torn manifest is damage (``repair``), not a new table
                reason = f"its version {self._known[0]} is another file now (now at version {version})"
            self._identity = identity if identity is not None else self._identity
            self._highest = version if reason else max(self._highest, version)
            mark = self._manifest_mark(version)
            self._known = (version, mark) if mark is not None else self._known
            if reason and self.on_new_table is not None:
                self.on_new_table(reason)
        return version

    def adopt(self) -> None:
        """Take the table now at the path as the one to compare against (after following a new one)."""
        identity = self._inodes()
        with self._lock:
            self._identity, self._highest, self._stamp, self._known = identity, 0, None, None

    def _torn(self, version: int) -> bool:
        from app.memory.store.recovery import manifest_problem

        directory = self.versions_dir
        return directory is not None and manifest_problem(directory / manifest_name(version)) is not None

    def _manifest_mark(self, version: int) -> tuple[int, int] | None:
        """(inode, mtime) of ``version``'s manifest (V2 naming), or None when it is not there (cleaned up)."""
        if self.versions_dir is None:
            return None
        try:
            info = os.stat(self.versions_dir / manifest_name(version))
        except OSError:
            return None
        return info.st_ino, info.st_mtime_ns

    def _stat(self) -> tuple[int, int] | None:
        if self.versions_dir is None:
            return None
        try:
            info = os.stat(self.versions_dir)
        except OSError:
            return None
        return info.st_ino, info.st_mtime_ns

    def _inodes(self) -> tuple[int, int] | None:
        """The inodes of the table directory and its version directory (None: not on a local disk)."""
        if self.versions_dir is None:
            return None
        try:
            return os.stat(self.versions_dir.parent).st_ino, os.stat(self.versions_dir).st_ino
        except OSError:
            return None
