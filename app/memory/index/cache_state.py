"""The vector cache's contents handed out for saving, and taken back from a saved index.

A part of ``VectorCache`` kept in its own module for size. ``export`` copies only what later commits
change in place (the live and scope arrays); the blocks of codes, statistics and bounds it hands out
are only ever appended to past the exported row count, and the exact rows below it never change, so
the file is written from them outside the lock while searches and commits go on.

``saved_base`` says which saved file the cache's row positions extend: rows below its count are that
file's, in its order (a restore or a whole save sets it; a compaction or reload of the cache voids it).
While it holds, ``export_delta`` hands out only what changed since (``index_delta``).
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pyarrow as pa

from app.memory.index.arrow_rows import ArrowRows
from app.memory.index.block_matrix import BlockMatrix
from app.memory.index.index_delta import Delta, DeltaSaved
from app.memory.index.index_file import Loaded, Saved
from app.memory.index.quantized_matrix import QuantizedMatrix
from app.memory.index.score_bounds import RANK, ScoreBounds

# Rows per step when a restore builds Python objects for every row: one call over a million held the GIL
# for ~0.3 s, and a request arriving meanwhile (a 503 while starting, a health probe) waited for all of it.
STEP_ROWS = 32_768


class CacheState:
    """Mixed into ``VectorCache``, which sets these attributes."""

    dimension: int
    scratch_dir: Path | None
    version: int | None
    _lock: threading.Lock
    _n: int
    _alive: np.ndarray
    _scope_codes: np.ndarray
    _scopes: dict[str | None, int]
    _position: dict[str, int]
    _copies: dict[str, list[int]]
    _rows: ArrowRows
    _matrix: QuantizedMatrix
    _bounds: ScoreBounds
    _generation: int
    saved_base: tuple[int, int] | None = None  # (generation, rows) of the saved file the positions extend

    def _clear(self, schema: pa.Schema | None = None) -> None:
        raise NotImplementedError

    def _reserve(self, rows: int) -> None:
        raise NotImplementedError

    def export(self) -> tuple[Saved, int] | None:
        """The contents at the cache's version and the generation they belong to; None when stale."""
        with self._lock:
            if self.version is None:
                return None
            n, snap = self._n, self._matrix.snapshot()
            bounds = self._bounds.snapshot(n)
            schema = self._rows.schema or pa.schema([])
            rows = pa.Table.from_batches(list(self._rows.batches), schema=schema)
            saved = Saved(
                version=self.version, n=n, dimension=self.dimension, codes=snap.codes, stats=snap.stats,
                alive=self._alive[:n].copy(), scope_codes=self._scope_codes[:n].copy(),
                scopes=[scope for scope, _ in sorted(self._scopes.items(), key=lambda item: item[1])],
                rows=rows, rows_at=snap.rows_at,
                basis=None if bounds is None else self._bounds.basis, bounds=bounds)
            return saved, self._generation

    def export_delta(self) -> tuple[DeltaSaved, int] | None:
        """The changes since ``saved_base`` and the generation they belong to; None when stale or no base."""
        with self._lock:
            base = self.saved_base
            if self.version is None or base is None or base[0] != self._generation:
                return None
            base_rows, n, snap = base[1], self._n, self._matrix.snapshot()
            tail = np.arange(base_rows, n)
            delta = DeltaSaved(version=self.version, n=n, base_rows=base_rows, alive=self._alive[:n].copy(),
                               scope_codes=self._scope_codes[base_rows:n].copy(),
                               scopes=[scope for scope, _ in sorted(self._scopes.items(), key=lambda item: item[1])],
                               rows=self._rows.slice_table(base_rows, n),
                               exact=np.empty((0, self.dimension), np.float32))
            generation = self._generation
        delta.exact = snap.rows_at(tail) if len(tail) else delta.exact  # rows past the base never change
        return delta, generation

    def mark_saved_base(self, generation: int, rows: int) -> None:
        """A whole save of ``generation`` with ``rows`` rows was written: later deltas extend it."""
        with self._lock:
            if generation == self._generation:
                self.saved_base = (generation, rows)

    def holds(self, generation: int) -> bool:
        """Whether the contents are still those of ``generation`` (not reloaded, compacted or invalidated)."""
        with self._lock:
            return self.version is not None and self._generation == generation

    def install(self, loaded: Loaded, delta: Delta | None = None) -> None:
        """Take ``loaded`` (and the ``delta`` written since it) as the contents, at the newest version they hold
        (the caller checked they are this table's).

        Raises:
            ValueError: its dimension or row count does not fit.
        """
        n = loaded.n
        if int(loaded.header["dimension"]) != self.dimension or loaded.rows.num_rows != n:
            raise ValueError("the saved index does not fit this cache")
        matrix = QuantizedMatrix.restored(self.dimension, self.scratch_dir, loaded.codes, loaded.stats, loaded.exact)
        bounds = ScoreBounds(self.dimension)
        if loaded.basis is not None and loaded.bounds is not None and loaded.basis.shape[1] == RANK:
            bounds.basis = np.ascontiguousarray(loaded.basis)
            blocks = BlockMatrix(RANK + 1)
            blocks.adopt(loaded.bounds)
            bounds._rows, bounds.n = blocks, n  # noqa: SLF001 - restored as it was saved
        total = n if delta is None else int(delta.header["rows"])
        if delta is not None:  # the rows appended since: their codes and bounds computed again
            matrix.reserve(int(delta.header["rows"]))
            matrix.put(n, delta.exact)
            bounds.put(n, delta.exact)
        ids = _strings(loaded.rows.column("id")) if n else []
        if delta is not None and delta.rows.num_rows:
            ids += _strings(delta.rows.column("id"))
        alive = loaded.alive if delta is None else delta.alive.copy()
        scope_codes = loaded.scope_codes if delta is None else np.concatenate([loaded.scope_codes, delta.scope_codes])
        position, copies = _positions(ids, alive)
        scopes = loaded.scopes if delta is None else list(delta.header["scopes"])
        with self._lock:
            self.version = None
            self._clear(loaded.rows.schema)
            self._matrix, self._bounds, self._n = matrix, bounds, total
            self._alive, self._scope_codes = alive, scope_codes
            self._reserve(total)
            self._scopes = {scope: code for code, scope in enumerate(scopes)}
            self._position, self._copies = position, copies
            for batch in loaded.rows.to_batches():
                self._rows.append_batch(batch)
            if delta is not None:
                for batch in delta.rows.to_batches():
                    self._rows.append_batch(batch)
            self.saved_base = (self._generation, n)
            self.version = loaded.version if delta is None else delta.version


def _strings(column: pa.ChunkedArray) -> list[str]:
    """``column.to_pylist()``, ``STEP_ROWS`` at a time (the GIL is taken back between steps)."""
    out: list[str] = []
    for start in range(0, len(column), STEP_ROWS):
        out += column.slice(start, STEP_ROWS).to_pylist()
    return out


def _positions(ids: list[str], alive: np.ndarray) -> tuple[dict[str, int], dict[str, list[int]]]:
    """Each live id's newest position, and the earlier copies of ids stored more than once."""
    live = np.flatnonzero(alive)
    position: dict[str, int] = {}
    for start in range(0, len(live), STEP_ROWS):
        step = live[start : start + STEP_ROWS].tolist()
        position.update(zip([ids[i] for i in step], step, strict=True))
    copies: dict[str, list[int]] = {}
    if len(position) < len(live):  # another writer stored some id twice: every copy stays searchable
        position = {}
        for i in live.tolist():
            memory_id = ids[i]
            if memory_id in position:
                copies.setdefault(memory_id, []).append(position[memory_id])
            position[memory_id] = i
    return position, copies
