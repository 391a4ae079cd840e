"""Exact top-k from an in-memory copy of the table, kept at the table's version.

Why: LanceDB's flat scan decodes the whole vector column for every query (an order of magnitude
slower than a numpy product over the same vectors), and an ANN index is approximate. The cache holds
the vectors as int8 codes in memory with exact float32 copies on disk (``quantized_matrix``) plus the
other columns as Arrow, answers a search with one int8 product, a partial sort and a float32 rescore
of the few rows that can still be in the top k, and is exact by construction (docs/performance.md,
'The vector cache against LanceDB').

Consistency: the cache's contents are always the table's at the version it records. Our own commits
update it in place (``apply_*``, with the versions around the commit read under the write lock); a
commit that does not start from the cache's version leaves it behind the table. Other writers'
commits come in as changes the store reads off the table's versions (``apply_changes``), or else as a
whole new copy (``load``). ``search`` answers only when the caller's table version is the cache's (or
older, or one ahead while our own commit from it is in flight and unacknowledged); otherwise it
returns None and the caller uses LanceDB (always correct).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from concurrent.futures import Executor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from app import heap
from app.memory.index import score_bounds
from app.memory.index.arrow_rows import ArrowRows
from app.memory.index.cache_state import CacheState
from app.memory.index.cached_reads import CachedReads
from app.memory.index.exact_top import Query, Top, best, threshold_tops
from app.memory.index.quantized_matrix import QuantizedMatrix, approximate
from app.memory.index.score_bounds import ScoreBounds

logger = logging.getLogger(__name__)

RELOAD_BATCH_ROWS = 4_096  # small batches keep the transient decode memory small
COMPACT_DEAD_SHARE = 0.25


class VectorCache(CachedReads, CacheState):
    """Vectors, scopes and row columns of one table; every method is thread-safe."""

    def __init__(self, dimension: int, row_columns: Sequence[str], scratch_dir: Path | None = None) -> None:
        """``scratch_dir``: where the exact vectors' unlinked row file goes (default: the system's temp dir)."""
        self.dimension = dimension
        self.row_columns = list(row_columns)
        self.scratch_dir = scratch_dir
        self.version: int | None = None
        self.reloads = 0
        self.last_reload_s = 0.0
        self._lock = threading.Lock()
        self._flights: list[int] = []  # the versions our commits in flight start from
        self._clear()

    def _clear(self, schema: pa.Schema | None = None) -> None:
        self._matrix = QuantizedMatrix(self.dimension, self.scratch_dir)
        self._alive = np.zeros(0, dtype=bool)
        self._scope_codes = np.full(0, -1, dtype=np.int32)
        self._n = 0
        self._rows = ArrowRows(schema)
        previous = getattr(self, "_bounds", None)  # any basis keeps the bounds exact: keep the fitted one
        self._bounds = ScoreBounds(self.dimension, previous.basis if previous is not None else None)
        self._generation = getattr(self, "_generation", 0) + 1  # row positions of earlier snapshots are void
        self._position: dict[str, int] = {}
        # Other writers may store an id twice; every copy stays searchable (earlier copies here).
        self._copies: dict[str, list[int]] = {}
        self._scopes: dict[str | None, int] = {}

    def __len__(self) -> int:
        return len(self._position) + sum(len(c) for c in self._copies.values())

    @property
    def nbytes(self) -> int:
        """Resident bytes of the vector matrix actually in use (the dominant cost)."""
        return self._n * self._matrix.row_bytes

    # --- loading ---------------------------------------------------------------------------------

    def reload(self, table: Any) -> None:
        """Read the whole table through LanceDB's read API (blocking). The version is read first, and the
        copy counts as current only if the table is still there after the scan: a commit racing an
        unpinned scan may leave rows of either version."""
        version = int(table.version)
        schema = pa.schema([table.schema.field(c) for c in self.row_columns if c in table.schema.names])
        expected = int(table.count_rows())
        query = table.search().select(self.load_columns(table.schema.names)).limit(None)
        self.load(version, query.to_batches(RELOAD_BATCH_ROWS), schema, expected, lambda: int(table.version) == version)

    def load_columns(self, names: Sequence[str]) -> list[str]:
        """The columns ``load`` and ``apply_changes`` need, of a table that has ``names``."""
        return [c for c in dict.fromkeys(["id", "scope", *self.row_columns, "vector"]) if c in names]

    def load(self, version: int, batches: Iterable[pa.RecordBatch], schema: pa.Schema, expected_rows: int,
             still_valid: Callable[[], bool] | None = None) -> bool:
        """Replace the contents with ``batches``, the table at ``version`` (blocking); False when another
        load took over. ``still_valid``: asked at the end, under the lock; False leaves the cache stale.

        The lock is held a batch at a time, not for the whole read (a second at 100k rows): meanwhile
        the cache is stale, so searches and reads go to LanceDB instead of waiting for it.
        """
        started = time.perf_counter()
        with self._lock:
            self.version = None
            self._clear(schema)
            self._reserve(expected_rows)
            generation = self._generation
        for batch in batches:
            with self._lock:
                if generation != self._generation:
                    return False
                self._append_batch(batch)
        with self._lock:
            if generation != self._generation:
                return False
            self.version = version if still_valid is None or still_valid() else None
            self.reloads += 1
        del batches  # a reader's decoded batches are freed only with it
        heap.release_free_memory()  # give their pages back to the OS
        self.last_reload_s = time.perf_counter() - started
        logger.info("vector cache loaded %d rows at version %d in %.2fs", len(self), version, self.last_reload_s)
        return True

    def _append_batch(self, batch: pa.RecordBatch) -> None:
        vectors = batch.column("vector")
        flat = vectors.flatten().to_numpy(zero_copy_only=False).astype(np.float32, copy=False)
        matrix = flat.reshape(len(batch), self.dimension)
        self._index(batch.column("id").to_pylist(), batch.column("scope").to_pylist(), matrix)
        # Copy the row columns out: a batch imported from LanceDB frees its buffers only as a whole, so
        # keeping a zero-copy slice of it would keep the (large) vector column alive as well.
        every = pa.array(np.arange(len(batch), dtype=np.int64))
        names = list(self._rows.schema.names) if self._rows.schema else [c for c in batch.schema.names if c != "vector"]
        columns = [batch.column(name).take(every) for name in names]
        schema = self._rows.schema or batch.select(names).schema
        self._rows.append_batch(pa.RecordBatch.from_arrays(columns, schema=schema))

    def _append(self, rows: list[dict[str, Any]], matrix: np.ndarray, *, replace: bool = False) -> None:
        self._index([r.get("id") for r in rows], [r.get("scope") for r in rows], matrix, replace=replace)
        self._rows.append_rows(rows)

    def _index(self, ids: list[Any], scopes: list[Any], matrix: np.ndarray, *, replace: bool = False) -> None:
        """Add rows; ``replace``: each replaces the row of its id (an update), else a second row with an id
        is one more copy (another writer's duplicate), kept alive."""
        self._reserve(self._n + len(ids))
        self._matrix.put(self._n, matrix)
        self._bounds.put(self._n, matrix)
        for memory_id, scope in zip(ids, scopes, strict=True):
            if replace:
                self._drop([memory_id])
            elif memory_id in self._position:
                self._copies.setdefault(memory_id, []).append(self._position[memory_id])
            i = self._n
            self._alive[i] = True
            self._scope_codes[i] = self._scopes.setdefault(scope, len(self._scopes))  # null stays null, as in SQL
            self._position[memory_id] = i
            self._n += 1
        if self._bounds.basis is None and self._n >= score_bounds.FIT_MIN_ROWS:
            self._bounds.fit(self._matrix.rows_at, self._n)

    def _reserve(self, rows: int) -> None:
        self._matrix.reserve(rows)
        capacity = self._matrix.capacity
        if capacity <= len(self._alive):
            return
        self._alive = np.concatenate([self._alive, np.zeros(capacity - len(self._alive), dtype=bool)])
        extra = capacity - len(self._scope_codes)
        self._scope_codes = np.concatenate([self._scope_codes, np.full(extra, -1, dtype=np.int32)])

    # --- our own commits -------------------------------------------------------------------------

    @contextmanager
    def writing(self, before: int) -> Iterator[None]:
        """Wrap one of our commits (inside the write lock), which starts from table version ``before``,
        so searches do not see it as foreign."""
        with self._lock:
            self._flights.append(before)
        try:
            yield
        finally:
            with self._lock:
                self._flights.remove(before)

    def is_current(self, version: int) -> bool:
        """Whether ``search`` at ``version`` would answer (our own commit in flight counts as current)."""
        with self._lock:
            return self._answers_at(version)

    def _answers_at(self, version: int) -> bool:
        """At ``version`` or past it (caller holds the lock).

        One behind ``version``: the table is at our own commit, in flight from the cache's version.
        Past it: a version read just before one of our commits landed may be compared after the cache
        took that commit in. The cache only ever moves from one version to the next through a commit
        it checked (or a reload), and versions only grow, so it holds everything up to ``version``.
        Under many concurrent writers this race made searches reload the whole cache, seconds of
        work at 100k rows, every few seconds (docs/performance.md, 'The vector cache against LanceDB').
        """
        if self.version is None:
            return False
        # One past it, while our commit from the cache's version is in flight: that commit, unacknowledged.
        return self.version >= version or (version == self.version + 1 and self.version in self._flights)

    def invalidate(self) -> None:
        """Mark the cache stale: the next search reloads it (a load in progress is abandoned)."""
        with self._lock:
            self.version = None
            self._generation += 1

    def _advance(self, before: int, after: int, *, one_commit: bool = True) -> bool:
        """True when the cache was at ``before`` (so the change may be applied); else it stays as it is.

        Lance numbers commits consecutively, so ``after != before + 1`` means another writer (one that
        ignores our lock) committed in between. Either way the cache keeps its version: behind the
        table, it catches up from the table's versions (``apply_changes``), our commit included; past
        ``before``, it took this commit in already.
        """
        if self.version != before or (one_commit and after != before + 1):
            return False
        self.version = after
        return True

    def apply_add(self, rows: Sequence[dict[str, Any]], before: int, after: int) -> None:
        """Rows (with ``vector``) that one commit took the table from ``before`` to ``after`` with."""
        with self._lock:
            if not self._advance(before, after):
                return
            clean = [{c: r.get(c) for c in self.row_columns} for r in rows]
            with self._stale_on_disk_error():
                self._append(clean, np.stack([np.asarray(r["vector"], dtype=np.float32) for r in rows]))

    def apply_delete(self, ids: Sequence[str], before: int, after: int) -> None:
        with self._lock:
            if not self._advance(before, after):
                return
            self._drop(ids)
            self._maybe_compact()

    def apply_update(self, memory_id: str, values: dict[str, Any], before: int, after: int) -> None:
        self.apply_updates({memory_id: values}, before, after)

    def apply_updates(self, updates: dict[str, dict[str, Any]], before: int, after: int) -> None:
        """In-place updates by one commit: each row is replaced by its updated copy (same vector unless given)."""
        with self._lock:
            if not self._advance(before, after):
                return
            for memory_id, values in updates.items():
                position = self._position.get(memory_id)
                if position is None:
                    continue
                row = {**self._rows.get(position), **{k: v for k, v in values.items() if k != "vector"}}
                vector = values.get("vector")
                with self._stale_on_disk_error():
                    matrix = np.asarray(vector if vector is not None else self._matrix.row(position), dtype=np.float32)
                    self._append([row], matrix.reshape(1, -1), replace=True)

    @contextmanager
    def _stale_on_disk_error(self) -> Iterator[None]:
        """A row file that cannot be written leaves the cache stale, not the commit failed: the table
        has the change, and searches fall back to LanceDB until a reload succeeds. Caller holds the lock."""
        try:
            yield
        except OSError:
            logger.exception("the vector cache could not store rows on disk; searches use LanceDB until it reloads")
            self.version = None

    def apply_rewrite(self, before: int, after: int, *, one_commit: bool = False) -> None:
        """Commits that changed no content (a compaction, which may take several, or a tail merge)."""
        with self._lock:
            self._advance(before, after, one_commit=one_commit)

    def apply_changes(self, before: int, after: int, gone: Collection[str], rows: pa.Table | None) -> bool:
        """Other writers' commits from ``before`` to ``after``: the ``gone`` ids deleted (or rewritten), and
        ``rows`` (``load_columns``) added or rewritten, newest copy of an id last. False, changing
        nothing, unless the cache is at ``before``.

        One batch of rows goes in under one hold of the lock; more go in a batch at a time, the cache
        stale meanwhile, so searches use LanceDB rather than wait (as in ``load``).
        """
        # One batch per fragment read would cost an append each: a burst of 100 appends is 100 fragments.
        batches = rows.combine_chunks().to_batches(RELOAD_BATCH_ROWS) if rows is not None else []
        with self._lock:
            if self.version != before:
                return False
            self._drop(gone)
            self.version = None  # until every row is in (never seen by a search when it is one batch)
            generation = self._generation
            if len(batches) <= 1:
                return self._finish(batches, after)
        for batch in batches[:-1]:
            with self._lock:
                if generation != self._generation or not self._finish([batch], None):
                    return False
        with self._lock:
            return generation == self._generation and self._finish(batches[-1:], after)

    def _finish(self, batches: Sequence[pa.RecordBatch], version: int | None) -> bool:
        """Append ``batches``, then stand at ``version`` (None: more to come). Caller holds the lock."""
        try:
            for batch in batches:
                self._append_batch(batch)
        except OSError:
            logger.exception("the vector cache could not store rows on disk; searches use LanceDB until it reloads")
            self.version = None
            return False
        if version is not None:
            self.version = version
            self._maybe_compact()
        return True

    def _drop(self, ids: Iterable[str]) -> None:
        for memory_id in ids:
            position = self._position.pop(memory_id, None)
            if position is not None:
                self._alive[position] = False
            for copy in self._copies.pop(memory_id, ()):
                self._alive[copy] = False

    def _maybe_compact(self) -> None:
        dead = self._n - len(self)
        if self._n and dead / self._n > COMPACT_DEAD_SHARE:
            self._compact()

    def _compact(self) -> None:
        """Drop dead rows, a block of kept rows at a time (read back from the old row file)."""
        keep = np.flatnonzero(self._alive[: self._n])
        rows = self._rows.take_table(keep)
        codes = self._scope_codes[keep]
        scopes = self._scopes
        old = self._matrix
        self._clear(self._rows.schema)
        self._scopes = scopes  # codes stay valid: the same scope dictionary
        step = self._matrix.block_rows
        with self._stale_on_disk_error():
            for written in range(0, len(keep), step):
                vectors = old.rows_at(keep[written : written + step])
                self._matrix.put(written, vectors)
                self._bounds.put(written, vectors)
        if self.version is None:  # the half-built copy is never searched: the next search reloads
            return
        for batch in rows.to_batches():
            self._rows.append_batch(batch)
        self._reserve(len(keep))
        self._position, self._copies = {}, {}
        for i, memory_id in enumerate(rows.column("id").to_pylist()):
            if memory_id in self._position:
                self._copies.setdefault(memory_id, []).append(self._position[memory_id])
            self._position[memory_id] = i
        self._alive[: len(keep)] = True
        self._scope_codes[: len(keep)] = codes
        self._n = len(keep)

    # --- search ----------------------------------------------------------------------------------

    def search(self, vector: np.ndarray, scope: str | None, limit: int, version: int,
               min_score: float | None = None) -> list[dict[str, Any]] | None:
        """Rows best first with ``score`` = cosine similarity, or None when the cache is not at ``version``."""
        return self.search_many([Query(vector, scope, limit, min_score)], version)[0]

    def search_many(self, queries: Sequence[Query | tuple[Any, ...]], version: int,
                    helper: Executor | None = None) -> list[list[dict[str, Any]] | None]:
        """Answer several searches with ONE pass over the int8 codes; each answer as ``search`` gives it.

        Searches with a ``min_score`` score only the rows whose projected bound reaches it
        (``score_bounds``), unless too many do. The products run outside the lock (numpy and numkong
        release the GIL; half of a full pass runs on ``helper`` if given), so our own commits do not
        queue behind them: appends only write rows past the snapshot's ``n``, and a compaction or
        reload (new generation) makes the answers None instead.
        """
        asked = [Query(*q) for q in queries]
        with self._lock:
            if not self._answers_at(version):
                return [None] * len(asked)
            n, snap, generation = self._n, self._matrix.snapshot(), self._generation
            bounds, basis = self._bounds.snapshot(n), self._bounds.basis
            alive = self._alive[:n].copy()
            by_scope = {scope: self._mask(alive, scope, n) for scope in {q.scope for q in asked}}
            masks = [by_scope[q.scope] for q in asked]
        if n == 0:
            return [[] for _ in asked]
        block = np.stack([np.asarray(q.vector, dtype=np.float32).reshape(-1) for q in asked])
        found = threshold_tops(snap, bounds, basis, n, block, asked, masks)
        full = [qi for qi, top in enumerate(found) if top is None]
        if full:  # one pass over the matrix for the whole batch
            approx = approximate(snap, n, block[full], helper)
            for row, qi in enumerate(full):
                found[qi] = best(snap, approx, row, masks[qi], asked[qi])
        tops = [top for top in found if top is not None]
        with self._lock:
            if generation != self._generation:
                return [None] * len(asked)
            taken = {columns: self._taken(tops, asked, columns) for columns in {q.columns for q in asked}}
        answers: list[list[dict[str, Any]] | None] = []
        for (top, top_scores), query in zip(tops, asked, strict=True):
            rows = [next(taken[query.columns]) for _ in top]
            answers.append([{**row, "score": float(score)} for row, score in zip(rows, top_scores, strict=True)])
        return answers

    def _taken(self, tops: list[Top], asked: list[Query], columns: tuple[str, ...] | None) -> Iterator[dict[str, Any]]:
        """The rows of the tops of the queries asking for ``columns``, in order, in one take. Caller holds the lock."""
        positions = [p for (p, _), q in zip(tops, asked, strict=True) if q.columns == columns]
        wanted = np.concatenate(positions) if positions else np.empty(0, dtype=np.int64)
        return iter(self._rows.take(wanted, columns) if len(wanted) else [])
