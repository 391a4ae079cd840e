"""Row columns as Arrow record batches: a few hundred bytes a row where a Python dict costs ~1 kB."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

MAX_ROW_CHUNKS = 256  # one small batch per commit would pile up; past this many they are merged


class ArrowRows:
    """The non-vector columns of the cached rows, appended in chunks and taken by position."""

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
        if len(self.batches) > MAX_ROW_CHUNKS:
            self._merge()

    def append_rows(self, rows: list[dict[str, Any]]) -> None:
        self.append_batch(pa.RecordBatch.from_pylist(rows, schema=self.schema))

    def get(self, i: int) -> dict[str, Any]:
        chunk = bisect.bisect_right(self.starts, i) - 1
        row: dict[str, Any] = self.batches[chunk].slice(i - self.starts[chunk], 1).to_pylist()[0]
        return row

    def take(self, indices: Sequence[int] | np.ndarray, columns: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """Rows at ``indices`` (any order), taken from their own chunks: a search wants a few rows,
        and a take over the whole chunked table touches every chunk. ``columns``: only those (turning
        the text of every row into Python was a noticeable share of a duplicate check's time;
        docs/performance.md, 'Duplicate checks')."""
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

    def slice_table(self, start: int, stop: int) -> pa.Table:
        """Rows ``start`` to ``stop``, without a copy (``take_table`` copies: seconds over a million rows)."""
        return pa.Table.from_batches(self.batches, schema=self.schema).slice(start, stop - start)

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
