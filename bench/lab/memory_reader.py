"""An in-memory ``MemoryReader`` over one scope: the memory domain's reads without LanceDB.

The ranking lab (``bench/lab/replay.py``) replays every recall of a benchmark many times with other
ranking options; it takes each query's keyword pool from the service's own ``keyword.rank`` over
this reader, and ``app.memory.hybrid.search`` runs on it unchanged. Vector search is exact (numpy,
best first, ties by insertion order) like the service's index.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from bench.support.common import top_k


class ArrayReader:
    """One scope: ids, texts, unit vectors, timestamps (ms) and importances, all in row order."""

    row_columns = ["id", "text", "importance", "timestamp"]

    def __init__(self, ids: Sequence[str], texts: Sequence[str], vectors: np.ndarray,
                 timestamps: Sequence[int] | None = None, importances: Sequence[float] | None = None) -> None:
        self.ids = list(ids)
        self.texts = list(texts)
        self.vectors = np.asarray(vectors, dtype=np.float32)
        self.timestamps = list(timestamps) if timestamps is not None else [0] * len(self.ids)
        self.importances = list(importances) if importances is not None else [0.7] * len(self.ids)
        self._position = {memory_id: i for i, memory_id in enumerate(self.ids)}

    def _row(self, i: int, score: float | None = None) -> dict[str, Any]:
        row: dict[str, Any] = {"id": self.ids[i], "text": self.texts[i], "importance": self.importances[i],
                               "timestamp": self.timestamps[i]}
        if score is not None:
            row["score"] = score
        return row

    def version(self) -> int:
        return 1

    def size_hint(self) -> int:
        return len(self.ids)

    def scan(self, where: str | None, columns: Sequence[str], limit: int | None = None) -> pa.Table:
        return self.scan_columns(where, columns).slice(0, limit)

    def scan_columns(self, where: str | None, columns: Sequence[str]) -> pa.Table:
        data = {"id": self.ids, "text": self.texts, "importance": self.importances, "timestamp": self.timestamps}
        return pa.table({c: data[c] for c in columns})

    def get_rows(self, ids: Sequence[str], columns: Sequence[str] | None = None) -> list[dict[str, Any]]:
        return [self._row(self._position[i]) for i in ids if i in self._position]

    def rows_with_scores(self, ids: Sequence[str], vector: np.ndarray) -> list[dict[str, Any]]:
        positions = [self._position[i] for i in dict.fromkeys(ids) if i in self._position]
        scores = self.vectors[positions] @ np.asarray(vector, dtype=np.float32) if positions else []
        return [self._row(p, float(s)) for p, s in zip(positions, scores, strict=True)]

    def vector_search(self, vector: np.ndarray, limit: int) -> list[dict[str, Any]]:
        scores = self.vectors @ np.asarray(vector, dtype=np.float32)
        return [self._row(int(i), float(scores[i])) for i in top_k(scores, limit)]

    async def vector_search_async(self, vector: np.ndarray, where: str | None, limit: int,
                                  min_score: float | None = None,
                                  columns: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
        return self.vector_search(vector, limit)
