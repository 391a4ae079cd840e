"""Reads as the journal's writers see them: the table (through the vector index) with the overlay on top.

Every read takes the overlay's snapshot first, then asks the store, and shows for each id of the
snapshot its newest entry instead of the store's row (``overlay``): an acknowledged write is seen at
once, a deleted row is gone, an updated one has its new text, and a row that is in both (flushed, the
index not yet told) is shown once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from app.memory.errors import TableDamaged
from app.memory.index.exact_top import with_cosines
from app.memory.journal.overlay import Overlay, Snapshot
from app.memory.store import Store


class _Guarded:
    """The store's reads, a failure to read the table (files gone under it) reported as ``table_damaged``."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._store, name)
        if not callable(attribute):
            return attribute
        if asyncio.iscoroutinefunction(attribute):
            async def guarded_async(*args: Any, **kwargs: Any) -> Any:
                try:
                    return await attribute(*args, **kwargs)
                except (OSError, RuntimeError, ValueError) as exc:
                    raise _damaged(exc) from exc
            return guarded_async

        def guarded(*args: Any, **kwargs: Any) -> Any:
            try:
                return attribute(*args, **kwargs)
            except (OSError, RuntimeError, ValueError) as exc:
                raise _damaged(exc) from exc
        return guarded


def _damaged(exc: BaseException) -> TableDamaged:
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    return TableDamaged(f"the memory table could not be read ({first}); `memory-mcp doctor` says what is wrong "
                        "and `memory-mcp repair` brings it back", retry_after_s=5)


class JournaledView:
    """``MemoryReader`` over one store and its overlay."""

    def __init__(self, store: Store, overlay: Overlay) -> None:
        self.store: Any = _Guarded(store)
        self.overlay = overlay
        self.before_read: Callable[[], object] | None = None  # team mode: take in other instances' writes

    def _snapshot(self) -> Snapshot:
        if self.before_read is not None:
            self.before_read()
        return self.overlay.snapshot()

    @property
    def row_columns(self) -> list[str]:
        return self.store.row_columns

    def version(self) -> int:
        return self.store.version()

    def size_hint(self) -> int:
        return self.store.size_hint() + len(self.overlay)

    def count(self) -> int:
        snap = self._snapshot()
        in_table = {row["id"] for row in self.store.get_rows(list(snap.rows), ["id"])} if snap.rows else set()
        added = sum(1 for memory_id, row in snap.rows.items() if row is not None and memory_id not in in_table)
        deleted = sum(1 for memory_id, row in snap.rows.items() if row is None and memory_id in in_table)
        return self.store.count() + added - deleted

    def scan(self, where: str | None, columns: Sequence[str], limit: int | None = None) -> pa.Table:
        snap = self._snapshot()
        if not snap.rows:
            return self.store.scan(where, columns, limit)
        base = self.store.scan(where, _with_id(columns), None if limit is None else limit + len(snap.rows))
        return _merged(base, snap, where, columns, limit)

    def scan_columns(self, where: str | None, columns: Sequence[str]) -> pa.Table:
        snap = self._snapshot()
        if not snap.rows:
            return self.store.scan_columns(where, columns)
        return _merged(self.store.scan_columns(where, _with_id(columns)), snap, where, columns, None)

    def get_rows(self, ids: Sequence[str], columns: Sequence[str] | None = None) -> list[dict[str, Any]]:
        snap = self._snapshot()
        wanted = list(columns or self.store.row_columns)
        mine = [memory_id for memory_id in ids if memory_id in snap.rows]
        rows = self.store.get_rows([memory_id for memory_id in ids if memory_id not in snap.rows], columns)
        for memory_id in dict.fromkeys(mine):
            row = snap.rows[memory_id]
            if row is not None:
                rows.append({column: row.get(column) for column in wanted})
        return rows

    def get_vector(self, memory_id: str) -> np.ndarray | None:
        snap = self._snapshot()
        if memory_id in snap.rows:
            row = snap.rows[memory_id]
            return None if row is None else np.asarray(row["vector"], dtype=np.float32)
        return self.store.get_vector(memory_id)

    def rows_with_scores(self, ids: Sequence[str], vector: np.ndarray) -> list[dict[str, Any]]:
        snap = self._snapshot()
        base = self.store.rows_with_scores([memory_id for memory_id in ids if memory_id not in snap.rows], vector)
        mine = [snap.rows[memory_id] for memory_id in dict.fromkeys(ids) if snap.rows.get(memory_id) is not None]
        if not mine:
            return base
        stored = np.stack([np.asarray(row["vector"], dtype=np.float32) for row in mine])  # type: ignore[index]
        plain = [{key: value for key, value in row.items() if key != "vector"} for row in mine]  # type: ignore[union-attr]
        return base + with_cosines(plain, stored, vector)

    def vector_search(self, vector: np.ndarray, where: str | None, limit: int,
                      min_score: float | None = None) -> list[dict[str, Any]]:
        snap = self._snapshot()
        base = self.store.vector_search(vector, where, limit + len(snap.rows), min_score)
        return _best(base, snap, vector, where, limit, min_score, None)

    async def vector_search_async(self, vector: np.ndarray, where: str | None, limit: int,
                                  min_score: float | None = None,
                                  columns: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
        snap = self.overlay.snapshot() if self.before_read is None else await asyncio.to_thread(self._snapshot)
        base = await self.store.vector_search_async(vector, where, limit + len(snap.rows), min_score, columns)
        if not snap.rows:
            return base[:limit]
        return await asyncio.to_thread(_best, base, snap, vector, where, limit, min_score, columns)


def _best(base: list[dict[str, Any]], snap: Snapshot, vector: np.ndarray, where: str | None, limit: int,
          min_score: float | None, columns: tuple[str, ...] | None) -> list[dict[str, Any]]:
    mine = snap.search(vector, where, columns)
    if min_score is not None:
        mine = [row for row in mine if row["score"] >= min_score]
    rows = [row for row in base if row["id"] not in snap.rows] + mine
    rows.sort(key=lambda row: -row["score"])
    return rows[:limit]


def _with_id(columns: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(["id", *columns]))


def _merged(base: pa.Table, snap: Snapshot, where: str | None, columns: Sequence[str], limit: int | None) -> pa.Table:
    """``base`` (which has ``id``) without the overlay's ids, then the overlay's rows passing ``where``;
    ``columns`` only."""
    if base.num_rows:
        shadowed = pa.array(list(snap.rows), type=pa.string())
        base = base.filter(pc.invert(pc.is_in(base.column("id"), value_set=shadowed)))
    mine = snap.matching(where)
    if mine:
        added = pa.Table.from_pylist([{column: row.get(column) for column in base.column_names} for row in mine],
                                     schema=base.schema)
        base = pa.concat_tables([base, added])
    base = base.select(list(columns))
    return base if limit is None else base.slice(0, limit)
