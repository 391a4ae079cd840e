"""Exact top-k from an in-memory copy of the table, kept at the table's version.

Why: LanceDB's flat scan decodes the whole vector column for every query (15-30x slower than a
numpy product over the same vectors at 100k rows), and an ANN index is approximate. The cache holds
the vectors as int8 codes in memory with exact float32 copies on disk (``quantized_matrix``) plus the
other columns as Arrow, answers a search with one int8 product, a partial sort and a float32 rescore
of the few rows that can still be in the top k, and is exact by construction.

Consistency: the cache records the table version it reflects. Our own commits update it in place
(``apply_*`` with the versions before and after the commit, read under the write lock); when the
version before a commit is not the cache's version, someone else wrote in between and the cache is
marked stale. ``search`` answers only when the caller's current table version is the cache's (or
an older one, read just before our own commit landed); otherwise it returns None and the caller
uses LanceDB (always correct) and reloads the cache. While one of our own commits is in flight
(``writing()``), the table is legitimately one version ahead of the cache for a moment; searches keep
answering from the pre-commit state (the write is not acknowledged yet), instead of each one
triggering a full reload.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Executor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from app.memory import heap, quantized_matrix, score_bounds
from app.memory.quantized_matrix import Approximation, QuantizedMatrix, Snapshot, approximate
from app.memory.score_bounds import ScoreBounds, candidates

logger = logging.getLogger(__name__)

RELOAD_BATCH_ROWS = 4_096  # small batches keep the transient decode memory small
COMPACT_DEAD_SHARE = 0.25
MAX_ROW_CHUNKS = 256

#: Past this share of a scope's rows as candidates, one full product is cheaper than gathering them.
MAX_CANDIDATE_SHARE = 0.05
#: A batch's candidates are gathered together up to this share of the rows (and ``MAX_CANDIDATE_SHARE``
#: per query). Why: a full product costs more with every query it serves, a gather only with the rows
#: (100k x 512, 15 queries, one thread: full product 14.1 ms; gathering 5k rows 1.2 ms, 20k 5.1 ms, 40k
#: 10.7 ms). Capped at 5% for the whole batch, 4% of the duplicate-check batches at 100k (32 writers)
#: took the full product (on two threads); the search thread's CPU per remember went 0.66-0.74 -> 0.63-0.65 ms.
MAX_UNION_SHARE = 0.25


class Query(NamedTuple):
    vector: np.ndarray  # unit query vector
    scope: str | None  # None: every scope
    limit: int
    min_score: float | None = None  # only rows scoring at least this (duplicate checks)
    columns: tuple[str, ...] | None = None  # only these row columns (None: all); a duplicate check needs the id


class _ArrowRows:
    """Row columns as Arrow record batches: a few hundred bytes a row where a Python dict costs ~1 kB."""

    def __init__(self, schema: pa.Schema | None) -> None:
        self.schema = schema
        self.batches: list[pa.RecordBatch] = []
        self.starts: list[int] = []
        self.count = 0

    def append_batch(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        if self.schema is None:
            self.schema = batch.schema
        self.starts.append(self.count)
        self.batches.append(batch)
        self.count += batch.num_rows
        if len(self.batches) > MAX_ROW_CHUNKS:  # one small batch per commit would pile up
            self._merge()

    def append_rows(self, rows: list[dict[str, Any]]) -> None:
        self.append_batch(pa.RecordBatch.from_pylist(rows, schema=self.schema))

    def get(self, i: int) -> dict[str, Any]:
        chunk = bisect.bisect_right(self.starts, i) - 1
        row: dict[str, Any] = self.batches[chunk].slice(i - self.starts[chunk], 1).to_pylist()[0]
        return row

    def take(self, indices: Sequence[int] | np.ndarray, columns: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """Rows at ``indices`` (any order), taken from their own chunks: a search wants a few rows,
        and a take over the whole chunked table cost 4 ms at 100k rows in 250 chunks. ``columns``:
        only those (turning the text of every row into Python was 14% of a duplicate check's time)."""
        wanted = np.asarray(indices, dtype=np.int64)
        chunks = np.searchsorted(np.asarray(self.starts, dtype=np.int64), wanted, side="right") - 1
        rows: list[dict[str, Any]] = [{}] * len(wanted)
        for chunk in np.unique(chunks):
            slots = np.flatnonzero(chunks == chunk)
            local = pa.array(wanted[slots] - self.starts[chunk])
            batch = self.batches[chunk] if columns is None else self.batches[chunk].select(list(columns))
            for slot, row in zip(slots, batch.take(local).to_pylist(), strict=True):
                rows[slot] = row
        return rows

    def take_table(self, indices: Sequence[int] | np.ndarray) -> pa.Table:
        table = pa.Table.from_batches(self.batches, schema=self.schema)
        return table.take(pa.array(np.asarray(indices, dtype=np.int64)))

    def _merge(self) -> None:
        batches = pa.Table.from_batches(self.batches, schema=self.schema).combine_chunks().to_batches()
        self.batches, self.starts, self.count = [], [], 0
        for batch in batches:
            self.starts.append(self.count)
            self.batches.append(batch)
            self.count += batch.num_rows


class VectorCache:
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
        self._writes_in_flight = 0
        self._clear()

    def _clear(self, schema: pa.Schema | None = None) -> None:
        self._matrix = QuantizedMatrix(self.dimension, self.scratch_dir)
        self._alive = np.zeros(0, dtype=bool)
        self._scope_codes = np.full(0, -1, dtype=np.int32)
        self._n = 0
        self._rows = _ArrowRows(schema)
        previous = getattr(self, "_bounds", None)  # any basis keeps the bounds exact: keep the fitted one
        self._bounds = ScoreBounds(self.dimension, previous.basis if previous is not None else None)
        self._generation = getattr(self, "_generation", 0) + 1  # row positions of earlier snapshots are void
        self._position: dict[str, int] = {}
        self._scopes: dict[str | None, int] = {}

    def __len__(self) -> int:
        return len(self._position)

    @property
    def nbytes(self) -> int:
        """Resident bytes of the vector matrix actually in use (the dominant cost)."""
        return self._n * self._matrix.row_bytes

    # --- loading ---------------------------------------------------------------------------------

    def reload(self, table: Any) -> None:
        """Read the whole table in batches (blocking). The version is read first, so a commit racing
        the scan leaves the cache conservatively stale rather than wrongly current."""
        started = time.perf_counter()
        version = int(table.version)
        columns = list(dict.fromkeys(["id", "scope", *self.row_columns, "vector"]))
        reader = table.search().select(columns).limit(None).to_batches(RELOAD_BATCH_ROWS)
        schema = pa.schema([table.schema.field(c) for c in self.row_columns if c in table.schema.names])
        expected = int(table.count_rows())
        with self._lock:
            self._clear(schema)
            self._reserve(expected)
            for batch in reader:
                self._append_batch(batch)
            # A writer that ignores our lock may have committed during the scan: then the rows may be
            # of either version, so the cache stays stale (and the next search reloads again).
            self.version = version if int(table.version) == version else None
            self.reloads += 1
        del reader  # its decoded batches are freed only with it
        heap.release_free_memory()  # give their pages back to the OS
        self.last_reload_s = time.perf_counter() - started
        logger.info("vector cache loaded %d rows at version %d in %.2fs", len(self), version, self.last_reload_s)

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

    def _append(self, rows: list[dict[str, Any]], matrix: np.ndarray) -> None:
        self._index([r.get("id") for r in rows], [r.get("scope") for r in rows], matrix)
        self._rows.append_rows(rows)

    def _index(self, ids: list[Any], scopes: list[Any], matrix: np.ndarray) -> None:
        self._reserve(self._n + len(ids))
        self._matrix.put(self._n, matrix)
        self._bounds.put(self._n, matrix)
        for memory_id, scope in zip(ids, scopes, strict=True):
            if memory_id in self._position:  # the newest copy of an id wins
                self._alive[self._position[memory_id]] = False
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
    def writing(self) -> Iterator[None]:
        """Wrap one of our commits (inside the write lock) so searches do not see it as foreign."""
        with self._lock:
            self._writes_in_flight += 1
        try:
            yield
        finally:
            with self._lock:
                self._writes_in_flight -= 1

    def known_ids(self, ids: Sequence[str]) -> set[str] | None:
        """Which of ``ids`` exist, when the cache is current enough to say (else None: ask the table)."""
        with self._lock:
            if self.version is None:
                return None
            return {i for i in ids if i in self._position}

    def is_current(self, version: int) -> bool:
        """Whether ``search`` at ``version`` would answer (our own commit in flight counts as current)."""
        with self._lock:
            return self._answers_at(version)

    def _answers_at(self, version: int) -> bool:
        """At ``version`` or past it (caller holds the lock).

        Past it: a version read just before one of our commits landed may be compared after the cache
        took that commit in. The cache only ever moves from one version to the next through a commit
        it checked (or a reload), and versions only grow, so it holds everything up to ``version``.
        Under 32 writers this race made searches reload the whole cache (1-4 s at 100k rows) every
        few seconds.
        """
        return self.version is not None and (self.version >= version or self._writes_in_flight > 0)

    def invalidate(self) -> None:
        """Mark the cache stale: the next search reloads it."""
        with self._lock:
            self.version = None

    def _advance(self, before: int, after: int, *, one_commit: bool = True) -> bool:
        """True when the cache was at ``before`` (so the change may be applied); else mark it stale.

        Lance numbers commits consecutively, so ``after != before + 1`` means another writer (one that
        ignores our lock) committed in between, and its change is not in the cache.
        """
        if self.version != before or (one_commit and after != before + 1):
            self.version = None
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
            for memory_id in ids:
                position = self._position.pop(memory_id, None)
                if position is not None:
                    self._alive[position] = False
            self._maybe_compact()

    def apply_update(self, memory_id: str, values: dict[str, Any], before: int, after: int) -> None:
        """An in-place update: the row is replaced by its updated copy (same vector unless given)."""
        with self._lock:
            if not self._advance(before, after):
                return
            position = self._position.get(memory_id)
            if position is None:
                return
            row = {**self._rows.get(position), **{k: v for k, v in values.items() if k != "vector"}}
            vector = values.get("vector")
            with self._stale_on_disk_error():
                matrix = np.asarray(vector if vector is not None else self._matrix.row(position), dtype=np.float32)
                self._append([row], matrix.reshape(1, -1))

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

    def _maybe_compact(self) -> None:
        dead = self._n - len(self._position)
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
        ids = rows.column("id").to_pylist()
        self._position = {memory_id: i for i, memory_id in enumerate(ids)}
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
        found = _threshold_tops(snap, bounds, basis, n, block, asked, masks)
        full = [qi for qi, top in enumerate(found) if top is None]
        if full:  # one pass over the matrix for the whole batch
            approx = approximate(snap, n, block[full], helper)
            for row, qi in enumerate(full):
                found[qi] = _best(snap, approx, row, masks[qi], asked[qi])
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

    # --- rows for keyword search ------------------------------------------------------------------

    def scope_columns(self, scope: str | None, columns: Sequence[str], version: int) -> pa.Table | None:
        """``columns`` of the live rows in ``scope`` (None: every scope), in cache order, as the table
        holds them at ``version``; None when the cache cannot answer at ``version``.

        Why: keyword search decodes the text of a whole scope; from LanceDB that scan was half of its
        time (10k rows: 7 of 13 ms; 100k: 41 of 112), here the columns are already in memory.
        """
        with self._lock:
            if not self._answers_at(version) or any(c not in self.row_columns for c in columns):
                return None
            n, batches, schema = self._n, list(self._rows.batches), self._rows.schema
            mask = self._mask(self._alive[:n], scope, n)
            mask = None if mask is None else mask.copy()  # the unscoped mask is the live array itself
        if schema is None or mask is None or not mask.any():
            return pa.table({c: pa.array([], type=schema.field(c).type if schema else pa.null()) for c in columns})
        table = pa.Table.from_batches(batches, schema=schema).select(list(columns))
        return table.filter(pa.array(mask))

    def rows(self, ids: Sequence[str], version: int) -> list[dict[str, Any]] | None:
        """The live rows of ``ids`` (in ``ids`` order, missing ones left out); None when the cache
        cannot answer at ``version``."""
        with self._lock:
            if not self._answers_at(version):
                return None
            positions = [self._position[memory_id] for memory_id in ids if memory_id in self._position]
            return self._rows.take(positions) if positions else []

    def rows_with_scores(self, ids: Sequence[str], vector: np.ndarray, version: int) -> list[dict[str, Any]] | None:
        """``rows(ids)`` with ``score`` = their exact cosine to ``vector``; None when the cache cannot
        answer at ``version``."""
        with self._lock:
            if not self._answers_at(version):
                return None
            positions = np.array([self._position[i] for i in ids if i in self._position], dtype=np.int64)
            snap, generation = self._matrix.snapshot(), self._generation
            rows = self._rows.take(positions) if len(positions) else []
        if not len(positions):
            return []
        order = np.argsort(positions, kind="stable")  # the row file reads ascending positions
        stored = np.empty((len(positions), self.dimension), dtype=np.float32)
        stored[order] = snap.rows_at(positions[order])
        with self._lock:
            if generation != self._generation:  # compacted or reloaded meanwhile: positions are void
                return None
        return with_cosines(rows, stored, vector)

    def _mask(self, alive: np.ndarray, scope: str | None, n: int) -> np.ndarray | None:
        """Rows a search may return (None: the scope has no row at all). Caller holds the lock."""
        if scope is None:
            return alive
        code = self._scopes.get(scope)
        return None if code is None else alive & (self._scope_codes[:n] == code)



def with_cosines(rows: Sequence[dict[str, Any]], stored: np.ndarray, vector: np.ndarray) -> list[dict[str, Any]]:
    """Each row with ``score`` = the cosine of its vector (``stored``, one per row) with ``vector``;
    rows whose vector has no direction are left out."""
    query = np.asarray(vector, dtype=np.float64).reshape(-1)
    query = query / max(float(np.linalg.norm(query)), 1e-12)
    matrix = np.asarray(stored, dtype=np.float64)
    norms = np.linalg.norm(matrix, axis=1)
    scores = (matrix @ query) / np.maximum(norms, 1e-12)
    return [{**row, "score": float(score)} for row, score, norm in zip(rows, scores, norms, strict=True) if norm > 0]


Top = tuple[np.ndarray, np.ndarray]  # (row positions, their scores), best first


def _threshold_tops(snap: Snapshot, bounds: list[np.ndarray] | None, basis: np.ndarray | None, n: int,
                    block: np.ndarray, asked: list[Query], masks: list[np.ndarray | None]) -> list[Top | None]:
    """Answers of the ``min_score`` searches the bounds can serve; None where a full product is needed.

    The projected bounds' candidates are narrowed by their int8 scores (codes are in memory) before
    any row is read back from the row file, all the batch's candidates in one gather.
    """
    found: list[Top | None] = [None] * len(asked)
    bounded = [qi for qi, q in enumerate(asked) if q.min_score is not None]
    if bounds is None or basis is None or not bounded:
        return found
    thresholds = np.array([asked[qi].min_score for qi in bounded], dtype=np.float32)
    chosen: dict[int, np.ndarray] = {}
    for qi, positions in zip(bounded, candidates(bounds, basis, n, block[bounded], thresholds), strict=True):
        mask = masks[qi]
        if mask is None:
            found[qi] = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32))
        elif len(positions := positions[mask[positions]]) <= MAX_CANDIDATE_SHARE * n:
            chosen[qi] = positions  # else a low threshold: the full product is cheaper
    if not chosen:
        return found
    union = np.unique(np.concatenate(list(chosen.values())))
    if len(union) > min(MAX_UNION_SHARE, MAX_CANDIDATE_SHARE * len(chosen)) * n:
        return found  # together too many to gather: one full product serves them all
    approx = quantized_matrix.approximate_at(snap, union, block[list(chosen)])
    for row, (qi, positions) in enumerate(chosen.items()):
        own = np.zeros(len(union), dtype=bool)
        own[np.searchsorted(union, positions)] = True
        keep = quantized_matrix.candidates(approx, row, own, asked[qi].limit, asked[qi].min_score)
        found[qi] = _rescored(snap, union[keep], asked[qi])
    return found


def _best(snap: Snapshot, approx: Approximation, qi: int, mask: np.ndarray | None, query: Query) -> Top:
    """The exact top of query ``qi``, from its approximate scores: only the candidates are read and rescored."""
    if mask is None:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
    return _rescored(snap, quantized_matrix.candidates(approx, qi, mask, query.limit, query.min_score), query)


def _rescored(snap: Snapshot, positions: np.ndarray, query: Query) -> Top:
    """The best ``limit`` of ``positions`` (ascending) by float32 score, ties in row order."""
    scores = snap.rows_at(positions) @ np.asarray(query.vector, dtype=np.float32).reshape(-1)
    order = np.argsort(-scores, kind="stable")[: query.limit]
    if query.min_score is not None:
        order = order[scores[order] >= query.min_score]
    return positions[order], scores[order]
