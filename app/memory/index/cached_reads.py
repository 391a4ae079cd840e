"""Reads by id and by scope from the vector cache's rows, and its live contents, at one table version.

A part of ``VectorCache`` kept in its own module for size: every method takes the cache's lock and
answers None when the cache cannot answer at the caller's table version (the caller asks LanceDB).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from app.memory.index.arrow_rows import ArrowRows
from app.memory.index.exact_top import with_cosines
from app.memory.index.quantized_matrix import QuantizedMatrix


class CachedReads:
    """Mixed into ``VectorCache``, which sets these attributes."""

    dimension: int
    row_columns: list[str]
    _lock: threading.Lock
    _n: int
    _alive: np.ndarray
    _scope_codes: np.ndarray
    _scopes: dict[str | None, int]
    _position: dict[str, int]
    _rows: ArrowRows
    _matrix: QuantizedMatrix
    _generation: int

    def _answers_at(self, version: int) -> bool:
        raise NotImplementedError

    def scope_columns(self, scope: str | None, columns: Sequence[str], version: int) -> pa.Table | None:
        """``columns`` of the live rows in ``scope`` (None: every scope), in cache order, as the table
        holds them at ``version``; None when the cache cannot answer at ``version``.

        Why: keyword search decodes the text of a whole scope; from LanceDB that scan was a large share
        of its time (docs/performance.md, 'Keyword scan from the cache'), here the columns are already in memory.
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

    def vector(self, memory_id: str, version: int) -> np.ndarray | None:
        """The exact stored vector of ``memory_id`` (empty when the cache has no such row); None when the
        cache cannot answer at ``version``."""
        with self._lock:
            if not self._answers_at(version):
                return None
            position = self._position.get(memory_id)
            if position is None:
                return np.empty(0, dtype=np.float32)
            snap, generation = self._matrix.snapshot(), self._generation
        found = snap.rows_at(np.array([position], dtype=np.int64))[0]
        with self._lock:
            return np.array(found, dtype=np.float32) if generation == self._generation else None

    def _mask(self, alive: np.ndarray, scope: str | None, n: int) -> np.ndarray | None:
        """Rows a search may return (None: the scope has no row at all). Caller holds the lock."""
        if scope is None:
            return alive
        code = self._scopes.get(scope)
        return None if code is None else alive & (self._scope_codes[:n] == code)

    def live(self, version: int) -> tuple[pa.Table, np.ndarray] | None:
        """Every live row (its row columns) and its exact vector, in cache order; None when the cache
        cannot answer at ``version``. For checks against the table, not for the request path."""
        with self._lock:
            if not self._answers_at(version):
                return None
            positions = np.flatnonzero(self._alive[: self._n])
            table, snap, generation = self._rows.take_table(positions), self._matrix.snapshot(), self._generation
        vectors = snap.rows_at(positions)
        with self._lock:
            return (table, vectors) if generation == self._generation else None
