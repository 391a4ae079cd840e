"""The reads the domain needs from storage, as one small interface; ``store.Store`` provides it.

Keyword search, the hybrid ranking and the service read through ``MemoryReader`` only: they never
see LanceDB handles, the vector index or the write lock.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import pyarrow as pa


class MemoryReader(Protocol):
    """Blocking reads of the memory table (run them in a worker thread), plus one async search."""

    row_columns: list[str]

    def version(self) -> int: ...

    def size_hint(self) -> int: ...

    def scan(self, where: str | None, columns: Sequence[str], limit: int | None = None) -> pa.Table: ...

    def scan_columns(self, where: str | None, columns: Sequence[str]) -> pa.Table: ...

    def get_rows(self, ids: Sequence[str], columns: Sequence[str] | None = None) -> list[dict[str, Any]]: ...

    def rows_with_scores(self, ids: Sequence[str], vector: np.ndarray) -> list[dict[str, Any]]: ...

    async def vector_search_async(self, vector: np.ndarray, where: str | None, limit: int,
                                  min_score: float | None = None,
                                  columns: tuple[str, ...] | None = None) -> list[dict[str, Any]]: ...
