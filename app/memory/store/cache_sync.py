"""Brings the vector cache to the table's newest version after other processes' commits.

Why: OpenClaw's memory-lancedb-pro writes the same table directly, and a full reload of the cache
takes about a second at 100k rows; done for every foreign commit, it was most of recall's latency
while another process wrote (docs/performance.md, 'Other writers on the same table'). Instead the two versions'
manifests are compared (``table_diff``, read with pylance, which opens any version by number): only
the fragments another writer added are read, deleted rows are found from the fragments whose
deletion files grew (their ids, not their vectors), and a compaction costs two reads of the id
column. The cache takes the change in one step (``VectorCache.apply_changes``), only if it is still
at the version the change starts from.

Where the change cannot be read that way (a column the cache holds changed type, a version that is
gone, a rewrite of more than ``INLINE_MAX_ROWS`` rows), the search thread does not wait: a background
thread catches up (or reloads the whole table, pinned at one version), and meanwhile the stale
cache answers nothing, so searches use LanceDB's exact scan.

The first load restores the cache from its saved index (``saved_index``) when that is still this
table's, then catches up as above; a thread saves it again now and then and at ``close``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyarrow import ipc

from app.memory.index import VectorCache, index_file
from app.memory.index.index_file import Loaded
from app.memory.index.vector_cache import RELOAD_BATCH_ROWS
from app.memory.store.background import yield_cpu_for_this_thread
from app.memory.store.saved_index import SavedIndex, Saver, index_path
from app.memory.store.table_diff import Diff, Files, Fragment, diff, files_of

logger = logging.getLogger(__name__)

#: Rows another writer added or rewrote that the search thread reads itself; more go to the background.
INLINE_MAX_ROWS = 2_048
#: Past this share of the table, the background thread reloads it whole rather than read the change.
RELOAD_SHARE = 0.25
#: Attempts to apply a change while our own commits keep moving the cache (each one applies in place).
MAX_ROUNDS = 4
#: How long the search thread or our writer waits for the other's catch-up to end (a few ms each)
#: before its own; a wait that long means it is not quick, and the search uses LanceDB instead.
CATCH_UP_WAIT_S = 0.25
#: pylance's caches, bounded as LanceDB's are in ``table.py`` (unbounded, they grow with every version).
CACHE_BYTES = 16 * 2**20
#: How long a search waits for the saved index being restored (a second or so) rather than scan LanceDB.
RESTORE_WAIT_S = 5.0


class CacheSync:
    """Keeps ``cache`` at the newest version of ``table`` (a LanceDB table on a path pylance can open)."""

    def __init__(self, cache: VectorCache, table: Any, current_version: Callable[[], int],
                 storage_options: dict[str, str] | None = None) -> None:
        self.cache = cache
        self.table = table
        self._current = current_version
        self._busy = threading.Lock()  # one catch-up or reload at a time
        self._worker: threading.Thread | None = None
        self._worker_lock = threading.Lock()
        self.catch_ups = 0  # changes applied incrementally
        self.rows_read = 0  # rows read for them (with vectors)
        self.background_runs = 0
        self.last_fallback = ""  # why the last change could not be read as one
        self.dataset = _open_dataset(table, storage_options or {})
        path = index_path(str(table.uri)) if self.dataset is not None else None
        self.saved = SavedIndex(path, cache) if path is not None else None
        self._restoring = threading.Event()  # set once the saved index is in, or the first load has ended
        self._mapped = threading.Event()  # set once the saved index is in, or known not to be usable
        self._loaded = threading.Event()  # set once the first load ended (caught up), before the file's check
        self._restore_tried = self.saved is None
        if self._restore_tried:
            self._restoring.set()
            self._mapped.set()
        self._verify: Loaded | None = None  # a restored file whose large sections are still to be checked
        self.saver = Saver(self.saved, lambda: self.dataset, current_version) if self.saved is not None else None

    def use_table(self, table: Any, storage_options: dict[str, str] | None = None) -> None:
        """Follow a new table at the same place (another process dropped and created it again)."""
        with self._busy:
            self.table = table
            self.dataset = _open_dataset(table, storage_options or {})

    # --- entry points -----------------------------------------------------------------------------

    def load(self) -> None:
        """Restore the saved index or load the whole table, and catch up (blocking; at start-up)."""
        with self._busy:
            if not self._restore():
                self._reload()
            self._catch_up(self._reload_rows())
        self._mapped.set()
        self._restoring.set()
        self._loaded.set()
        self._check_restored()
        self._start_saver()

    def catch_up(self, wait_s: float = 0.0) -> None:
        """Bring the cache to the newest version now if the change is small, else start the
        background thread and return (the caller uses LanceDB meanwhile). ``wait_s``: how long to
        wait for another thread's catch-up to end first. Never raises."""
        if not self._restoring.is_set():  # restoring the saved index takes about a second: wait for it
            self._restoring.wait(RESTORE_WAIT_S)
        if self._worker is not None and self._worker.is_alive():
            return  # the background thread is at it: never wait for a reload
        if not (self._busy.acquire(timeout=wait_s) if wait_s > 0 else self._busy.acquire(blocking=False)):
            return  # another thread's catch-up took longer than asked to wait
        try:
            done = self._catch_up(INLINE_MAX_ROWS)
        except Exception as exc:  # noqa: BLE001 - the cache stays behind; the background thread reloads it
            logger.warning("could not read another writer's change into the vector cache (%s); reloading it",
                           str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__)
            done = False
        finally:
            self._busy.release()
        if not done:
            self.start_background()

    def start_background(self) -> None:
        with self._worker_lock:
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._background, name="memory-cache-sync", daemon=True)
                self._worker.start()

    def wait_loaded(self, timeout_s: float) -> bool:
        """Wait until the first load (or restore) is caught up with the table, or failed; the restored file's
        large sections may still be being checked (a mismatch reloads from the table)."""
        return self._loaded.wait(timeout_s)

    def wait_mapped(self, timeout_s: float) -> bool:
        """Wait until the saved index is in the cache (not yet caught up), or known not to be usable."""
        return self._mapped.wait(timeout_s)

    @property
    def in_background(self) -> bool:
        """Whether the background thread is restoring, catching up or reloading the cache."""
        worker = self._worker
        return worker is not None and worker.is_alive()

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait for the background thread to finish (tests and benchmarks); False on timeout."""
        worker = self._worker
        if worker is not None:
            worker.join(timeout_s)
        return worker is None or not worker.is_alive()

    # --- work -------------------------------------------------------------------------------------

    def _background(self) -> None:
        self.background_runs += 1
        with self._busy:
            try:
                self._restore()
                self._restoring.set()  # restored and caught up, or not: searches stop waiting
                try:
                    caught_up = self._catch_up(self._reload_rows())
                except Exception as exc:  # noqa: BLE001 - a version between is unreadable (repaired): reload
                    self.last_fallback = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
                    caught_up = False
                if not caught_up:
                    logger.info("reloading the vector cache: %s", self.last_fallback or "it holds no version yet")
                    self._reload()
                    self._catch_up(self._reload_rows())
            except Exception:  # noqa: BLE001 - searches stay on LanceDB; the next stale search retries
                logger.exception("the vector cache could not be brought up to date")
            finally:
                self._mapped.set()
                self._restoring.set()
                self._loaded.set()
        self._check_restored()  # at the lowered priority of a restore (``_restore``)
        self._start_saver()

    # --- the saved index ------------------------------------------------------------------------

    def _restore(self) -> bool:
        """Restore the saved index and catch up from it, once per process (caller holds ``_busy``)."""
        if self._restore_tried or self.saved is None or self.dataset is None:
            return False
        self._restore_tried = True
        try:
            self._verify = self.saved.restore(self.dataset, self._current())
        finally:
            self._mapped.set()
        if self._verify is None:
            return False
        # Searches answer from it now, at its version (``Store.catching_up``), while the commits since are read:
        # that catch-up (a compaction followed, a million ids compared) and the rest of this thread's work
        # yield the cores to them.
        self._restoring.set()
        yield_cpu_for_this_thread()
        if not self._catch_up(self._reload_rows()):
            self._verify.close()  # the caller reloads from the table; the file is left for the next save
            self._verify = None
            return False
        return True

    def _check_restored(self) -> None:
        """Checksum a restored file's large sections (seconds at a million rows, while searches use it);
        a mismatch reloads the cache from the table."""
        loaded, self._verify = self._verify, None
        if loaded is None or self.saved is None:
            return
        try:
            good = index_file.verify_large(loaded)
        finally:
            loaded.close()
        if good:
            return
        self.saved.rejected = "checksum mismatch in its vectors"
        logger.warning("the saved vector index %s is corrupt; reloading the cache from the table", self.saved.path)
        self.saved.discard()
        with self._busy:
            self.cache.invalidate()
            self._reload()
            self._catch_up(self._reload_rows())

    def close(self) -> None:
        """Stop the saving thread and save a changed cache (at shutdown; blocking)."""
        if self.saver is not None:
            self.saver.close()

    def _start_saver(self) -> None:
        if self.saver is not None:
            self.saver.start()

    def _reload_rows(self) -> int:
        return max(INLINE_MAX_ROWS, int(len(self.cache) * RELOAD_SHARE))

    def _catch_up(self, max_rows: int) -> bool:
        """True when the cache is current or was moved as far as the table was (caller holds ``_busy``);
        False when the change needs a reload or more than ``max_rows`` rows read."""
        if self.dataset is None:
            return self.cache.version is not None and self.cache.version >= self._current()
        for _ in range(MAX_ROUNDS):
            base, target = self.cache.version, self._current()
            if base is None:
                return False
            if base >= target:
                return True
            applied = self._apply(self.dataset, base, target, max_rows)
            if applied is None:
                return False
        return True  # our own commits kept moving it: searches use LanceDB this time, the next one retries

    def _apply(self, dataset: Any, base: int, target: int, max_rows: int) -> bool | None:
        """Read and apply the change from ``base`` to ``target``: True if applied, False if the cache
        moved meanwhile, None if it cannot be read incrementally."""
        try:
            before, after = dataset.checkout_version(base), dataset.checkout_version(target)
        except (OSError, ValueError, RuntimeError):  # a version cleaned up since: reload
            return self._cannot(f"version {base} or {target} is gone")
        columns = self.cache.load_columns(before.schema.names)
        if not _same_columns(before, after, columns):
            return self._cannot("a column the cache holds changed")
        tracked = frozenset(f.id() for f in after.lance_schema.fields() if f.name() in columns)
        at_base, at_target = _fragments(before), _fragments(after)
        # A compaction drops fragments; with none dropped (appends), its records need not be read.
        dropped = {f.id for f in at_base} - {f.id for f in at_target}
        rewritten = _rewritten(after, base, target, at_base) if dropped else Rewritten()
        change = diff(at_base, at_target, rewritten.written, tracked)
        if change.rows_to_read + rewritten.carried_rows > max_rows:
            return self._cannot(f"{change.rows_to_read + rewritten.carried_rows} rows rewritten (more than {max_rows})")
        # Ids the compactions' output holds now: a row there outlived the change (unless read anew below).
        survivors = _scan(after, change.moved, ["id"])["id"].combine_chunks() if change.moved else None
        carried = None
        if rewritten.carried:
            carried, survivors = _carried(dataset, rewritten, columns, survivors)
        gone = _gone(before, after, change, {f.id: f for f in at_base}, {f.id: f for f in at_target}, survivors)
        rows = _scan(after, change.added, columns) if change.added else None
        if carried is not None:  # older than the added rows: the newest copy of an id goes last
            rows = carried if rows is None else pa.concat_tables([carried, rows.select(carried.schema.names)])
        if not self.cache.apply_changes(base, target, gone, rows):
            return self.cache.version is not None
        self.catch_ups += 1
        self.rows_read += 0 if rows is None else rows.num_rows
        logger.debug("vector cache %d -> %d: %d rows read, %d gone", base, target, change.rows_to_read, len(gone))
        return True

    def _cannot(self, why: str) -> None:
        self.last_fallback = why
        return None

    def _reload(self) -> None:
        """The whole table at one version (pinned: commits meanwhile are caught up afterwards)."""
        if self.dataset is None:
            self.cache.reload(self.table)
            return
        version = self._current()
        pinned = self.dataset.checkout_version(version)
        names = pinned.schema.names
        schema = pa.schema([pinned.schema.field(c) for c in self.cache.row_columns if c in names])
        batches = pinned.to_batches(columns=self.cache.load_columns(names), batch_size=RELOAD_BATCH_ROWS)
        if self.cache.load(version, batches, schema, pinned.count_rows()) and self.saver is not None:
            self.saver.due = True  # a restart finds it instead of loading the table again



def _open_dataset(table: Any, storage_options: dict[str, str]) -> Any | None:
    """The table through pylance, or None (the cache then reloads whole through LanceDB)."""
    try:
        import lance

        return lance.dataset(table.uri, storage_options=storage_options or None,
                             metadata_cache_size_bytes=CACHE_BYTES, index_cache_size_bytes=CACHE_BYTES)
    except Exception:  # noqa: BLE001 - an optimisation: without it, other writers' commits cost a reload
        logger.warning("cannot open %s with pylance; other writers' commits reload the vector cache",
                       getattr(table, "uri", table), exc_info=True)
        return None


def _fragments(dataset: Any) -> list[Fragment]:
    return [Fragment.of(f.metadata) for f in dataset.get_fragments()]


def _same_columns(before: Any, after: Any, columns: list[str]) -> bool:
    """Whether the cache's columns are at both versions, with the same types and field ids."""
    def shape(dataset: Any) -> dict[str, tuple[int, pa.DataType]]:
        ids = {f.name(): f.id() for f in dataset.lance_schema.fields()}
        return {c: (ids.get(c, -1), dataset.schema.field(c).type) for c in columns if c in dataset.schema.names}

    old = shape(before)
    return len(old) == len(columns) and old == shape(after)


@dataclass
class Rewritten:
    """What compactions between two versions wrote: ``written``, the new fragments (with their files) that
    hold only rows of older fragments; ``carried``, the older fragments among their inputs the cache never
    saw (appended after its version), as (the version before the compaction, fragment id), to read there."""

    written: dict[int, Files] = field(default_factory=dict)
    carried: list[tuple[int, int]] = field(default_factory=list)
    carried_rows: int = 0


def _rewritten(dataset: Any, base: int, target: int, at_base: list[Fragment]) -> Rewritten:
    """The compactions between the versions whose inputs are fragments holding the data files they held at
    ``base`` (their rows still live are in the output unchanged; rows deleted since ``base``, before or after
    the compaction, are found by ``_gone``) or fragments appended since (carried: their rows are read at the
    version before the compaction, not the whole output). A compaction of fragments whose data changed after
    ``base`` (or without a readable record) is read as new rows."""
    known = {f.id: f for f in at_base}
    out = Rewritten()
    for version in range(base + 1, target + 1):
        try:
            operation = dataset.read_transaction(version).operation
        except Exception:  # noqa: BLE001 - without the record, those rows are read as new
            continue
        if type(operation).__name__ != "Rewrite":
            continue
        for group in operation.groups:
            inputs = [Fragment.of(f) for f in group.old_fragments]
            if all(f.id not in known or _same_data(known[f.id], f) for f in inputs):
                out.written.update({int(f.id): files_of(f) for f in group.new_fragments})
                new_inputs = [f for f in inputs if f.id not in known]
                out.carried += [(version - 1, f.id) for f in new_inputs]
                out.carried_rows += sum(f.live_rows for f in new_inputs)
    return out


def _carried(dataset: Any, rewritten: Rewritten, columns: list[str],
             survivors: pa.Array | None) -> tuple[pa.Table, pa.Array | None]:
    """The rows of the carried fragments, read at the version each was compacted from, that are still in the
    compactions' output; and ``survivors`` without their ids (their cached copies, if any, are older)."""
    tables = []
    for version in sorted({v for v, _ in rewritten.carried}):
        pinned = dataset.checkout_version(version)
        tables.append(_scan(pinned, [i for v, i in rewritten.carried if v == version], columns))
    rows = pa.concat_tables(tables)
    if survivors is None:
        return rows.slice(0, 0), None
    ids = rows["id"].combine_chunks()
    return rows.filter(pc.is_in(ids, value_set=survivors)), survivors.filter(pc.invert(pc.is_in(survivors, ids)))


def _same_data(at_base: Fragment | None, compacted: Fragment) -> bool:
    """Whether a compaction's input holds the rows it held at ``base``, less deletions since (a deletion
    file only grows: a row deleted never comes back to the same data file)."""
    return at_base is not None and (at_base.files, at_base.physical_rows) == (compacted.files, compacted.physical_rows)


def _gone(before: Any, after: Any, change: Diff, old: dict[int, Fragment], new: dict[int, Fragment],
          survivors: pa.Array | None) -> set[str]:
    """Ids live at ``before`` in the fragments that lost rows and no longer there (``survivors``, the ids a
    compaction moved, excepted). Which rows went is read off the deletion files; ids are read for those rows
    only (a whole fragment's when it was dropped), never vectors."""
    ids: list[Any] = []
    if change.dropped:
        dropped = _scan(before, change.dropped, ["id"])["id"].combine_chunks()
        if survivors is not None:  # a million ids at a compaction: compared in Arrow, not Python sets
            dropped = dropped.filter(pc.invert(pc.is_in(dropped, value_set=survivors)))
        ids += dropped.to_pylist()
    scanned = [i for i in change.thinned if not _thinned_ids(before, old[i], new[i], ids)]
    if scanned:  # deletion files pyarrow cannot read: compare the live row addresses instead
        was, kept = _addresses(before, scanned), _addresses(after, scanned)
        for fragment_id in scanned:
            live = was[(was >> 32) == fragment_id]  # ascending: a fragment's rows in order
            dead = live[~np.isin(live, kept)]
            if len(dead):  # a fragment's take counts live rows only: a dead row's index is its rank in ``live``
                taken = before.get_fragment(fragment_id).take(np.searchsorted(live, dead).tolist(), columns=["id"])
                ids += taken["id"].to_pylist()
    if survivors is not None and len(survivors) and ids:
        kept = pc.is_in(pa.array(ids, type=survivors.type), value_set=survivors).to_numpy(zero_copy_only=False)
        ids = [i for i, moved in zip(ids, kept, strict=True) if not moved]
    return {i for i in ids if i is not None}


def _thinned_ids(before: Any, old: Fragment, new: Fragment, ids: list[Any]) -> bool:
    """Add to ``ids`` those of the rows ``new``'s deletion file adds to ``old``'s; False when the files
    are not plain Arrow lists on a local disk (a large deletion set is a bitmap)."""
    was, now = _deleted(before.uri, old), _deleted(before.uri, new)
    if was is None or now is None or old.physical_rows != new.physical_rows:
        return False
    dead = np.setdiff1d(now, was)
    if len(dead):  # a fragment's take counts live rows only: skip the rows deleted before
        taken = before.get_fragment(old.id).take((dead - np.searchsorted(was, dead)).tolist(), columns=["id"])
        ids += taken["id"].to_pylist()
    return True


def _deleted(root: str, fragment: Fragment) -> np.ndarray | None:
    """The fragment's deleted row offsets, ascending, from its deletion file (None: not readable so)."""
    if fragment.deletion is None:
        return np.empty(0, dtype=np.int64)
    if fragment.deletion_array is None or "://" in root:
        return None
    try:
        with ipc.open_file(str(Path(root) / fragment.deletion_array)) as reader:
            offsets = reader.read_all().column(0).to_numpy()
    except (OSError, pa.ArrowException):
        return None
    return np.unique(offsets.astype(np.int64))


def _addresses(dataset: Any, fragment_ids: list[int]) -> np.ndarray:
    addresses = _scan(dataset, fragment_ids, [], addresses=True)["_rowaddr"]
    return np.sort(addresses.to_numpy()).astype(np.uint64, copy=False)


def _scan(dataset: Any, fragment_ids: list[int], columns: list[str], *, addresses: bool = False) -> pa.Table:
    fragments = [dataset.get_fragment(i) for i in fragment_ids]
    table: pa.Table = dataset.scanner(columns=columns, fragments=fragments, with_row_address=addresses,
                                      batch_size=RELOAD_BATCH_ROWS).to_table()
    return table

