"""The vector cache saved beside the table, restored at start-up when it is still this table's.

Why: loading the cache from the table reads and quantizes every vector (20 s and more at a million
rows); mapping the saved file in takes about a second, and ``cache_sync`` then reads only the
commits made since it was saved (docs/performance.md, 'Start-up from the saved index').

Where: ``<db>/.memory-mcp-index/<table>/index.bin`` on the local disk, beside the table and never
inside its ``.lance`` directory, which other programs write. Tables on object storage keep none.

Never stale, never another table's: the file records the table's URI, its version and the SHA-256
of that version's manifest file (which names the version's data files, all of them random UUIDs, and
its commit time). It is used only if that manifest is still there, byte for byte, the table is at
that version or past it, and the vector column and row columns are what the file holds; the commits
since are then read from the table. A table dropped and created again has other manifests, and a
pruned version cannot be checked: either way the cache loads from the table, as without a file, and
the next save replaces it. A torn or corrupt file fails its checksums (``index_file``).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from app.memory.index import VectorCache, index_file
from app.memory.index.index_file import IndexFileError, Loaded
from app.memory.store.version_probe import manifest_name

logger = logging.getLogger(__name__)

INDEX_DIR = ".memory-mcp-index"
FILE_NAME = "index.bin"
#: Below this many rows a load from the table takes a fraction of a second: no file is kept.
SAVE_MIN_ROWS = 10_000
#: How often the saving thread looks whether a save is due. A changed cache is saved at most every
#: ``SAVE_INTERVAL_S`` (a save writes every vector: seconds at a million rows), right after a load from
#: the table, and at shutdown.
SAVE_CHECK_S = 10.0
SAVE_INTERVAL_S = 300.0


def index_path(table_uri: str) -> Path | None:
    """Where the index of the table at ``table_uri`` is kept; None for a table not on a local disk."""
    if "://" in table_uri and not table_uri.startswith("file://"):
        return None
    table_dir = Path(table_uri.removeprefix("file://"))
    name = table_dir.name.removesuffix(".lance")
    return table_dir.parent / INDEX_DIR / name / FILE_NAME


class SavedIndex:
    """Saves ``cache`` to ``path`` and restores it, for the table that pylance opened as a dataset."""

    def __init__(self, path: Path, cache: VectorCache, min_rows: int | None = None) -> None:
        self.path = path
        self.cache = cache
        self.min_rows = SAVE_MIN_ROWS if min_rows is None else min_rows
        self.saved_version: int | None = None  # the version the file holds, as far as this process knows
        self.saves = 0
        self.restores = 0
        self.rejected = ""  # why the last file found could not be used
        self.last_save_s = 0.0
        self.last_restore_s = 0.0

    # --- restoring ------------------------------------------------------------------------------

    def restore(self, dataset: Any, current: int) -> Loaded | None:
        """Install the saved index into the cache if it is this table's at a version up to ``current``;
        returns it (its large sections still to be checked, ``index_file.verify_large``), else None."""
        started = time.perf_counter()
        try:
            loaded = index_file.read(self.path)
        except FileNotFoundError:
            return None
        except (IndexFileError, OSError, ValueError, KeyError, TypeError) as exc:
            return self._reject(f"unreadable: {exc}")
        try:
            why = self._mismatch(loaded, dataset, current)
            if why:
                loaded.close()
                return self._reject(why)
            self.cache.install(loaded)
        except (OSError, ValueError, RuntimeError) as exc:
            loaded.close()
            return self._reject(f"not installable: {exc}")
        self.saved_version = loaded.version
        self.restores += 1
        self.last_restore_s = time.perf_counter() - started
        logger.info("vector cache restored from %s: %d rows at version %d in %.2fs",
                    self.path, loaded.n, loaded.version, self.last_restore_s)
        return loaded

    def _mismatch(self, loaded: Loaded, dataset: Any, current: int) -> str:
        """Why ``loaded`` is not this table's at a version it can catch up from ('' when it is)."""
        version = loaded.version
        if version > current:
            return f"it is at version {version}, past the table's {current} (a table made anew)"
        try:
            pinned = dataset.checkout_version(version)
        except (OSError, ValueError, RuntimeError):
            return f"the table's version {version} is gone"
        expected = identity(dataset.uri, version, pinned, self.cache.row_columns)
        if expected is None or loaded.header.get("identity") != expected:
            return f"it is not this table's version {version} (the table was made anew or changed)"
        if not loaded.rows.schema.equals(_row_schema(pinned, self.cache.row_columns)):
            return "its row columns differ from the table's"
        return ""

    def _reject(self, why: str) -> None:
        self.rejected = why
        logger.warning("not using the saved vector index %s: %s; loading from the table", self.path, why)
        self.discard()
        return None

    def discard(self) -> None:
        """Remove the file (a later save writes a good one)."""
        try:
            self.path.unlink(missing_ok=True)
        except OSError:
            logger.warning("cannot remove %s", self.path, exc_info=True)
        self.saved_version = None

    # --- saving ---------------------------------------------------------------------------------

    def save(self, dataset: Any, still_same_table: Any) -> bool:
        """Write the cache's contents, if current and new, to the file (blocking, seconds at a million
        rows; searches and commits go on meanwhile). ``still_same_table()``: asked after the identity
        is read, True unless the table was made anew meanwhile (the probe then invalidates the cache)."""
        exported = self.cache.export()
        if exported is None:
            return False
        saved, generation = exported
        if saved.version == self.saved_version or saved.n < self.min_rows:
            return False
        started = time.perf_counter()
        try:
            pinned = dataset.checkout_version(saved.version)
        except (OSError, ValueError, RuntimeError):
            return False  # pruned already: the next save writes a newer version
        ident = identity(dataset.uri, saved.version, pinned, self.cache.row_columns)
        # The manifest read must be this table's: a table made anew since the export is noticed here.
        if ident is None or not still_same_table() or not self.cache.holds(generation):
            return False
        try:
            size = index_file.write(self.path, saved, ident)
        except OSError:
            logger.exception("cannot save the vector index to %s", self.path)
            return False
        self.saved_version = saved.version
        self.saves += 1
        self.last_save_s = time.perf_counter() - started
        logger.info("vector index saved: %d rows at version %d, %.0f MB in %.1fs", saved.n, saved.version,
                    size / 2**20, self.last_save_s)
        return True


class Saver:
    """Saves ``saved``'s cache on a thread of its own now and then, and at ``close``."""

    def __init__(self, saved: SavedIndex, dataset: Callable[[], Any], current: Callable[[], int]) -> None:
        self.saved = saved
        self._dataset = dataset  # the table now (another may replace a dropped one)
        self._current = current
        self.due = False  # loaded from the table: save at the next check
        self._saved_at = time.monotonic()
        self._lock = threading.Lock()  # one save at a time
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def save(self) -> bool:
        """Save now if the cache changed since the last save (blocking)."""
        dataset = self._dataset()
        if dataset is None:
            return False
        with self._lock:
            self._current()  # a table made anew is noticed (and the cache invalidated) before the export
            done = self.saved.save(dataset, lambda: self._current() >= 0)
            if done or self.saved.cache.version == self.saved.saved_version:
                self.due, self._saved_at = False, time.monotonic()
            return done

    def save_if_due(self) -> None:
        cache = self.saved.cache
        if cache.version is None or cache.version == self.saved.saved_version:
            return
        if self.due or time.monotonic() - self._saved_at >= SAVE_INTERVAL_S:
            try:
                self.save()
            except Exception:  # noqa: BLE001 - the next check retries; a restart loads from the table
                logger.exception("could not save the vector index")

    def start(self) -> None:
        with self._lock:
            if self._stop.is_set() or (self._thread is not None and self._thread.is_alive()):
                return
            self._thread = threading.Thread(target=_save_loop, args=(weakref.ref(self), self._stop),
                                            name="memory-index-save", daemon=True)
            self._thread.start()

    def close(self) -> None:
        """Stop the thread and save a changed cache (at shutdown; blocking)."""
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join()
        try:
            self.save()
        except Exception:  # noqa: BLE001 - shutdown goes on; the next start loads from the table
            logger.exception("could not save the vector index at shutdown")


def _save_loop(ref: weakref.ref[Saver], stop: threading.Event) -> None:
    """The saving thread: holds its ``Saver`` only while saving, so a store dropped unclosed is freed."""
    while not stop.wait(SAVE_CHECK_S):
        saver = ref()
        if saver is None:
            return
        saver.save_if_due()
        del saver


def identity(uri: str, version: int, pinned: Any, row_columns: list[str]) -> dict[str, Any] | None:
    """What ties a saved index to one table's ``version``: its manifest's hash, URI and vector column;
    None when the manifest cannot be read."""
    versions = Path(uri.removeprefix("file://")) / "_versions"
    for name in (manifest_name(version), f"{version}.manifest"):  # Lance's V2 naming, then V1
        try:
            digest = hashlib.sha256((versions / name).read_bytes()).hexdigest()
        except OSError:
            continue
        vector = str(pinned.schema.field("vector").type) if "vector" in pinned.schema.names else None
        return {"uri": str(Path(uri.removeprefix("file://")).resolve()), "version": version,
                "manifest_sha256": digest, "vector": vector,
                "columns": [c for c in row_columns if c in pinned.schema.names]}
    return None


def _row_schema(pinned: Any, row_columns: list[str]) -> pa.Schema:
    names = pinned.schema.names
    return pa.schema([pinned.schema.field(c) for c in row_columns if c in names])
