"""The vector cache saved beside the table, restored at start-up when it is still this table's.

Why: loading the cache from the table reads and quantizes every vector (20 s and more at a million
rows); mapping the saved file in takes about a second, and ``cache_sync`` then reads only the
commits made since it was saved (docs/performance.md, 'Start-up from the saved index').

Where: ``<db>/.memory-mcp-index/<table>/index.bin`` on the local disk, beside the table and never
inside its ``.lance`` directory, which other programs write. Tables on object storage keep none.

A stop writes only what changed since the file was written (``index.bin.delta``, ``index_delta``): the
rows appended since and every row's live flag. The saving thread writes the whole file again, off the stop
path, once the delta outgrows ``index_delta.MAX_SHARE`` of it or the cache compacted or reloaded itself.

Never stale, never another table's: the file (or its delta) records the table's URI, its version and the
SHA-256 of that version's manifest file (which names the version's data files, all of them random UUIDs, and
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

from app.memory.index import VectorCache, index_delta, index_file
from app.memory.index.index_delta import Delta, delta_path
from app.memory.index.index_file import IndexFileError, Loaded
from app.memory.store.background import yield_cpu_for_this_thread
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
#: A stop writes the whole index only up to this many rows (about a second); a larger one is written by the
#: saving thread soon after the load, and a stop gives that up rather than wait (a supervisor kills slow stops).
STOP_WHOLE_SAVE_MAX_ROWS = 100_000


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
        """Install the saved index (and its delta) into the cache if it is this table's at a version up to
        ``current``; returns it (its large sections still to be checked, ``index_file.verify_large``), else None.
        A delta that cannot be used is dropped, and the file alone restored (the commits since are caught up)."""
        started = time.perf_counter()
        removed = index_file.remove_stale_temps(self.path.parent)
        if removed:
            logger.info("removed %d temporary file(s) of a save cut short: %s", len(removed),
                        ", ".join(p.name for p in removed))
        try:
            loaded = index_file.read(self.path)
        except FileNotFoundError:
            return None
        except (IndexFileError, OSError, ValueError, KeyError, TypeError) as exc:
            return self._reject(f"unreadable: {exc}")
        delta = self._delta(loaded, dataset, current)
        try:
            why = "" if delta is not None else self._mismatch(loaded.version, loaded.header, loaded, dataset, current)
            if why:
                loaded.close()
                return self._reject(why)
            self.cache.install(loaded, delta)
        except (OSError, ValueError, RuntimeError) as exc:
            loaded.close()
            return self._reject(f"not installable: {exc}")
        self.saved_version = loaded.version if delta is None else delta.version
        self.restores += 1
        self.last_restore_s = time.perf_counter() - started
        logger.info("vector cache restored from %s%s: %d rows at version %d in %.2fs", self.path,
                    "" if delta is None else f" and its delta ({delta.rows.num_rows} rows since)",
                    len(self.cache), self.saved_version, self.last_restore_s)
        return loaded

    def _delta(self, loaded: Loaded, dataset: Any, current: int) -> Delta | None:
        """The delta written since ``loaded``, if it is whole, its base's and this table's; else None (removed)."""
        path = delta_path(self.path)
        try:
            delta = index_delta.read(path, loaded)
        except FileNotFoundError:
            return None
        except (IndexFileError, OSError, ValueError, KeyError, TypeError) as exc:
            logger.warning("not using the saved index's delta %s: %s", path, exc)
            path.unlink(missing_ok=True)
            return None
        why = self._mismatch(delta.version, delta.header, loaded, dataset, current)
        if why:
            logger.warning("not using the saved index's delta %s: %s", path, why)
            path.unlink(missing_ok=True)
            return None
        return delta

    def _mismatch(self, version: int, header: dict[str, Any], loaded: Loaded, dataset: Any, current: int) -> str:
        """Why a file at ``version`` with ``header`` is not this table's to catch up from ('' when it is)."""
        if version > current:
            return f"it is at version {version}, past the table's {current} (a table made anew)"
        try:
            pinned = dataset.checkout_version(version)
        except (OSError, ValueError, RuntimeError):
            return f"the table's version {version} is gone"
        expected = identity(dataset.uri, version, pinned, self.cache.row_columns)
        if expected is None or header.get("identity") != expected:
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

    def save(self, dataset: Any, still_same_table: Any, *, whole: bool = False, delta_only: bool = False,
             stop: threading.Event | None = None) -> bool:
        """Save the cache's contents, if current and new (blocking; searches and commits go on meanwhile): a
        delta since the file when the cache still extends it and the delta is small enough, unless ``whole``;
        else the whole file (seconds at a million rows). ``still_same_table()``: asked after the identity is
        read, True unless the table was made anew meanwhile (the probe then invalidates the cache). ``stop``: a
        whole save is given up once it is set."""
        if not whole and self._save_delta(dataset, still_same_table):
            return True
        if delta_only:
            return False
        exported = self.cache.export()
        if exported is None:
            return False
        saved, generation = exported
        if saved.version == self.saved_version or saved.n < self.min_rows or self._newer_on_disk(saved.version):
            return False
        started = time.perf_counter()
        ident = self._identity(dataset, saved.version, still_same_table, generation)
        if ident is None:
            return False
        try:
            size = index_file.write(self.path, saved, ident, stop)
            delta_path(self.path).unlink(missing_ok=True)  # it extended the file just replaced
        except index_file.SaveCancelled:
            logger.info("saving the vector index was given up for the stop (%d rows); it is saved while the "
                        "server runs", saved.n)
            return False
        except OSError:
            logger.exception("cannot save the vector index to %s", self.path)
            return False
        self.cache.mark_saved_base(generation, saved.n)
        self.saved_version = saved.version
        self.saves += 1
        self.last_save_s = time.perf_counter() - started
        logger.info("vector index saved: %d rows at version %d, %.0f MB in %.1fs", saved.n, saved.version,
                    size / 2**20, self.last_save_s)
        return True

    def _newer_on_disk(self, version: int) -> bool:
        """Whether another process saved a newer version since (a server, while a command's store lagged)."""
        newest = -1
        for path in (self.path, delta_path(self.path)):
            try:
                newest = max(newest, int(index_file.read_header(path)["version"]))
            except (OSError, IndexFileError, KeyError, TypeError, ValueError):
                continue
        return newest > version

    def _save_delta(self, dataset: Any, still_same_table: Any) -> bool:
        """Write only what changed since the file, when the cache extends it; False when a whole save is due."""
        exported = self.cache.export_delta()
        if exported is None or not self.path.exists():
            return False
        delta, generation = exported
        if delta.version == self.saved_version:
            return True  # nothing new: nothing to write
        if delta.n - delta.base_rows > index_delta.MAX_SHARE * max(delta.base_rows, 1) \
                or self._newer_on_disk(delta.version):
            return False
        started = time.perf_counter()
        ident = self._identity(dataset, delta.version, still_same_table, generation)
        try:
            base = index_delta.base_mark(index_file.read_header(self.path))
        except (OSError, IndexFileError, KeyError):
            return False
        if ident is None or base["rows"] != delta.base_rows:
            return False
        try:
            size = index_delta.write(delta_path(self.path), delta, ident, base)
        except OSError:
            logger.exception("cannot save the vector index's delta beside %s", self.path)
            return False
        self.saved_version = delta.version
        self.saves += 1
        self.last_save_s = time.perf_counter() - started
        logger.info("vector index delta saved: %d rows appended since the file, version %d, %.1f MB in %.2fs",
                    delta.n - delta.base_rows, delta.version, size / 2**20, self.last_save_s)
        return True

    def _identity(self, dataset: Any, version: int, still_same_table: Any, generation: int) -> dict[str, Any] | None:
        try:
            pinned = dataset.checkout_version(version)
        except (OSError, ValueError, RuntimeError):
            return None  # pruned already: the next save writes a newer version
        ident = identity(dataset.uri, version, pinned, self.cache.row_columns)
        # The manifest read must be this table's: a table made anew since the export is noticed here.
        if ident is None or not still_same_table() or not self.cache.holds(generation):
            return None
        return ident


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

    def save(self, *, delta_only: bool = False) -> bool:
        """Save now if the cache changed since the last save (blocking); ``delta_only``: no whole save.
        The saving thread's whole save is given up when ``close`` begins."""
        dataset = self._dataset()
        if dataset is None:
            return False
        stop = None if self._stop.is_set() else self._stop
        with self._lock:
            self._current()  # a table made anew is noticed (and the cache invalidated) before the export
            done = self.saved.save(dataset, lambda: self._current() >= 0, delta_only=delta_only, stop=stop)
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
        """Stop the thread (giving up a whole save under way) and save what changed as a delta (at shutdown;
        blocking, well under a second): a whole save, seconds at a million rows, is the saving thread's."""
        with self._lock:  # a start under way finishes starting its thread first, or sees the stop
            self._stop.set()
            thread = self._thread
        if thread is not None:
            thread.join()
        try:
            # With no file yet (a server stopped within seconds of its first load) a small cache is saved whole.
            small = len(self.saved.cache) <= STOP_WHOLE_SAVE_MAX_ROWS
            self.save(delta_only=self.saved.path.exists() or not small)
        except Exception:  # noqa: BLE001 - shutdown goes on; the next start loads from the table
            logger.exception("could not save the vector index at shutdown")


def _save_loop(ref: weakref.ref[Saver], stop: threading.Event) -> None:
    """The saving thread: holds its ``Saver`` only while saving, so a store dropped unclosed is freed."""
    yield_cpu_for_this_thread()  # a whole save is seconds of CPU and disk, never a request's
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
