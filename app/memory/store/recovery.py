"""Recovery at open: a damaged newest table version is quarantined so the store still opens (P10, REC-01).

A hard stop or power loss can leave the newest Lance manifest empty or torn (pond#110): the rename
that publishes it reached the disk, its bytes did not. LanceDB then refuses to open the table at all
("Invalid range 0..0"), or, for a zero-filled file, opens an empty version 0 as if every memory were
gone. Either way the server would crash-loop or lie, so before opening we check the newest manifests
and, when they are damaged, *move* them (never delete) to ``<db>/quarantine/<UTC time>/`` with the
same relative paths; LanceDB then opens the previous version and new commits become the new head.

Layout this relies on (lance 13 / lancedb 0.40)::

    <db>/<table>.lance/_versions/<name>.manifest     V2 naming: name = u64::MAX - version (20 digits)
                                                     V1 naming (older tables): name = version
    <db>/<table>.lance/_versions/latest_version_hint.json   {"version": N}, a hint LanceDB may read
    <db>/<table>.lance/_transactions/<read_version>-<uuid>.txn, data/*.lance   (left alone)

A manifest file ends with a 16-byte footer: u64 offset of the manifest message, u16 major, u16 minor
and the magic ``LANC``. A file without it is damaged for sure; a file with it whose message does
not decode is found when LanceDB fails to open it.

Local only: a table on object storage is opened as it is, with a log line saying so. An object store
has no torn renames (a put is whole or absent), and moving manifests there under other instances'
feet would need the lock that does not exist across machines.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from app.errors import AppError, Unavailable
from app.memory.store.locks import WriteLock
from app.settings import Settings

logger = logging.getLogger(__name__)

T = TypeVar("T")
U64_MAX = 2**64 - 1
V2_NAME_DIGITS = 20
DETACHED_BIT = 1 << 63  # lance's detached versions: never a head, never ours to move
FOOTER_BYTES = 16
MAGIC = b"LANC"
HINT_NAME = "latest_version_hint.json"
LATEST_V1_NAME = "_latest.manifest"
QUARANTINE_DIR = "quarantine"
#: A power loss damages the last commit or two; more than this is not a torn head but a broken disk.
MAX_QUARANTINED = 3
# Messages of LanceDB's open errors that mean "this manifest cannot be read", not "no access".
# LanceDB 0.40 even panics ("rust future panicked") on a manifest whose length prefix is garbage.
_UNREADABLE_MARKERS = ("invalid range", "decode", "protobuf", "file size is too small", "magic",
                       "corrupt", "unexpected eof", "manifest", "panicked")


class StoreUnrecoverable(Unavailable):
    """No version of the table could be opened; the message says what was tried and what to do."""

    code = "store_unrecoverable"


@dataclass(frozen=True)
class ManifestFile:
    version: int
    path: Path
    signature: tuple[int, int, int] = (0, 0, 0)  # inode, size, mtime: "still the file we judged"


@dataclass
class RecoveryReport:
    """What a recovery did; ``health()`` is what the readiness probe shows."""

    table_dir: Path
    quarantine_dir: Path
    quarantined_versions: list[int] = field(default_factory=list)
    moved_files: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    recovered_version: int | None = None

    def health(self) -> dict[str, Any]:
        return {
            "degraded": True,
            "recovered_from_version": self.recovered_version,
            "quarantined_versions": list(self.quarantined_versions),
            "quarantine_path": str(self.quarantine_dir),
        }


def health_fields(report: RecoveryReport | None) -> dict[str, Any]:
    """The recovery part of ``MemoryService.health()``: ``degraded`` is always present."""
    return report.health() if report is not None else {"degraded": False}


def versions_dir(settings: Settings) -> Path:
    return _local_dir(settings) / f"{settings.table}.lance" / "_versions"


def version_of_name(name: str) -> int | None:
    """The table version a ``_versions`` file name stands for, or None if it is no version manifest."""
    stem, dot, suffix = name.partition(".")
    if dot != "." or suffix != "manifest" or not stem.isdigit():
        return None
    version = U64_MAX - int(stem) if len(stem) == V2_NAME_DIGITS else int(stem)
    return None if version < 0 or version & DETACHED_BIT else version


def list_manifests(directory: Path) -> list[ManifestFile]:
    """Version manifests, newest first (empty if the table does not exist yet)."""
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return []
    found: list[ManifestFile] = []
    for entry in entries:
        version = version_of_name(entry.name)
        if version is None:
            continue
        with _suppress_vanished():
            info = entry.stat()
            found.append(ManifestFile(version, Path(entry.path), (info.st_ino, info.st_size, info.st_mtime_ns)))
    return sorted(found, key=lambda m: m.version, reverse=True)


def manifest_problem(path: Path) -> str | None:
    """Why a manifest file is certainly unreadable (empty, torn, zero-filled), or None if it looks whole."""
    try:
        size = path.stat().st_size
        if size == 0:
            return "zero bytes"
        if size < FOOTER_BYTES:
            return f"{size} bytes, shorter than the footer"
        with path.open("rb") as handle:
            handle.seek(size - FOOTER_BYTES)
            footer = handle.read(FOOTER_BYTES)
    except FileNotFoundError:
        return None  # moved meanwhile (another process recovered it)
    except OSError as exc:
        return f"unreadable ({type(exc).__name__})"
    if footer[-4:] != MAGIC:
        return f"{size} bytes without the Lance footer (torn or zero-filled)"
    if int.from_bytes(footer[:8], "little") >= size - FOOTER_BYTES:
        return f"{size} bytes, footer points past the end"
    return None


def damaged_head(manifests: list[ManifestFile]) -> list[tuple[ManifestFile, str]]:
    """The run of damaged manifests at the top, newest first; stops at the first whole one."""
    damaged: list[tuple[ManifestFile, str]] = []
    for manifest in manifests:
        problem = manifest_problem(manifest.path)
        if problem is None:
            break
        damaged.append((manifest, problem))
    return damaged


def looks_unreadable(exc: BaseException) -> bool:
    """LanceDB's open failed because a manifest does not decode (not a permission or model problem)."""
    if isinstance(exc, AppError | PermissionError | FileNotFoundError):
        return False
    message = str(exc).lower()
    return any(marker in message for marker in _UNREADABLE_MARKERS)


@contextlib.contextmanager
def _suppress_vanished() -> Iterator[None]:
    with contextlib.suppress(FileNotFoundError):  # another process moved it between listing and stat
        yield


def open_with_recovery(settings: Settings, open_store: Callable[[], T],
                       version_of: Callable[[T], int]) -> tuple[T, RecoveryReport | None]:
    """Open the store; quarantine a damaged head first, or when LanceDB cannot read it, and open again.

    Raises:
        StoreUnrecoverable: every version, or more than ``MAX_QUARANTINED`` newest ones, are damaged.
    """
    if settings.on_object_store:
        logger.info("memory table on object storage (%s): recovery and quarantine are local-only; skipped",
                    settings.db_uri)
        return open_store(), None
    run = _Recovery(settings)
    for _ in range(MAX_QUARANTINED + 2):
        manifests = list_manifests(run.versions)
        damaged = damaged_head(manifests)
        if damaged:
            run.quarantine(damaged)
            continue
        try:
            store = open_store()
        except Exception as exc:
            if not manifests or not looks_unreadable(exc):
                raise
            run.quarantine([(manifests[0], f"LanceDB cannot read it ({_first_line(exc)})")])
            continue
        opened = version_of(store)
        if manifests and opened < manifests[0].version:  # e.g. a zero-filled file read as empty version 0
            run.quarantine([(manifests[0], f"LanceDB read it as version {opened}")])
            continue
        return store, run.finish(opened)
    raise run.unrecoverable("the table still fails to open after quarantining")


def quarantine_torn_head(settings: Settings) -> list[int]:
    """Quarantine the newest manifests that are certainly unreadable (empty, torn), as a start would, for a
    running table (``repair``); returns their versions. Takes the write lock."""
    run = _Recovery(settings)
    damaged = damaged_head(list_manifests(run.versions))
    if damaged:
        run.quarantine(damaged)
    return [manifest.version for manifest, _ in damaged]


class _Recovery:
    """The state of one open: what was moved where, and why."""

    def __init__(self, settings: Settings) -> None:
        self.db_path = _local_dir(settings)
        self.versions = versions_dir(settings)
        self.table_dir = self.versions.parent
        self.lock = WriteLock(self.db_path, settings.lock_timeout_s)
        self.report: RecoveryReport | None = None

    def quarantine(self, damaged: list[tuple[ManifestFile, str]]) -> None:
        """Move the damaged head manifests under the write lock, if they are still the head."""
        with self.lock.hold():  # no commit of ours or OpenClaw's lands while the head changes
            current = list_manifests(self.versions)
            if [m for m, _ in damaged] != current[: len(damaged)]:
                return  # someone else recovered or committed meanwhile: judge again
            already = len(self.report.quarantined_versions) if self.report else 0
            if already + len(damaged) > MAX_QUARANTINED or len(damaged) >= len(current):
                raise self.unrecoverable("no undamaged version is left within reach", damaged)
            report = self._report()
            for manifest, reason in damaged:
                self._move(manifest.path)
                report.quarantined_versions.append(manifest.version)
                report.reasons.append(f"version {manifest.version}: {reason}")
            self._move_stale_companions(current[len(damaged)].version)
            _fsync_dir(self.versions)
            self._write_report()

    def finish(self, opened: int) -> RecoveryReport | None:
        if self.report is None:
            return None
        self.report.recovered_version = opened
        self._write_report()
        # The one place an operator learns that acknowledged writes were lost: ERROR, never memory text.
        logger.error(
            "memory table %s: damaged newest version(s) %s quarantined in %s (%s); opened version %d; the journal "
            "flushes memory-mcp's writes of the quarantined version(s) again, other writers' writes in them are lost",
            self.table_dir, _versions_text(self.report.quarantined_versions), self.report.quarantine_dir,
            "; ".join(self.report.reasons), opened,
        )
        return self.report

    def unrecoverable(self, why: str, damaged: list[tuple[ManifestFile, str]] | None = None) -> StoreUnrecoverable:
        tried = [*(self.report.reasons if self.report else [])]
        tried += [f"version {m.version}: {r}" for m, r in damaged or []]
        moved = f"moved to {self.report.quarantine_dir}: {', '.join(self.report.moved_files)}" if self.report \
            else "nothing was moved"
        message = (f"the memory table {self.table_dir} cannot be opened: {why}. Damaged: {'; '.join(tried) or 'none'}. "
                   f"At most {MAX_QUARANTINED} newest versions are quarantined automatically and never the last "
                   f"one; {moved}; nothing was deleted. Restore {self.db_path} from a backup, or move the "
                   f"damaged manifests out of {self.versions} by hand.")
        logger.error("%s", message)
        return StoreUnrecoverable(message)

    def _report(self) -> RecoveryReport:
        if self.report is None:
            stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
            target = self.db_path / QUARANTINE_DIR / stamp
            target.mkdir(parents=True, exist_ok=False)  # a fresh directory: a move can never overwrite
            self.report = RecoveryReport(table_dir=self.table_dir, quarantine_dir=target)
        return self.report

    def _move(self, path: Path) -> None:
        report = self._report()
        relative = path.relative_to(self.db_path)
        target = report.quarantine_dir / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            raise StoreUnrecoverable(f"refusing to overwrite {target} while quarantining {path}")
        os.rename(path, target)
        report.moved_files.append(str(relative))

    def _move_stale_companions(self, new_head: int) -> None:
        """A hint naming a quarantined version, and a damaged V1 ``_latest.manifest``, go too."""
        hint = self.versions / HINT_NAME
        if hint.exists():
            hinted = _hint_version(hint)
            if hinted is None or hinted > new_head:
                self._move(hint)
        latest = self.versions / LATEST_V1_NAME
        if latest.exists() and manifest_problem(latest) is not None:
            self._move(latest)

    def _write_report(self) -> None:
        report = self._report()
        body = {"table": str(report.table_dir), "quarantined_versions": report.quarantined_versions,
                "recovered_version": report.recovered_version, "moved_files": report.moved_files,
                "reasons": report.reasons, "at": datetime.now(UTC).isoformat()}
        (report.quarantine_dir / "report.json").write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
        _fsync_dir(report.quarantine_dir)


def _local_dir(settings: Settings) -> Path:
    if settings.db_dir is None:
        raise ValueError(f"recovery is local-only; {settings.db_uri} is on object storage")  # a programming error
    return settings.db_dir


def _hint_version(path: Path) -> int | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8")).get("version")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) else None


def _fsync_dir(path: Path) -> None:
    """Make the renames durable: the point is to survive the next power loss too."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _versions_text(versions: list[int]) -> str:
    return ", ".join(str(v) for v in versions)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:200]
