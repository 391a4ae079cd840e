"""A row matrix stored as fixed-size blocks, so it grows without ever being copied.

Why: one contiguous matrix must be reallocated to grow, and ``np.resize`` holds the old and the
new copy at once, which was the server's RSS peak under writes (docs/performance.md, 'Blocks
instead of one matrix'). Blocks of ``BLOCK_ROWS`` rows are only ever appended; the unused tail is at
most one block (8 MB at 512-d). A product over the blocks costs what one over the whole matrix
costs (each block is still thousands of rows, well past where BLAS reaches full speed).

Not thread-safe on its own: ``VectorCache`` serialises writers and hands searches a ``snapshot``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Executor

import numpy as np

BLOCK_ROWS = 4_096
#: Below this many blocks (16k rows) half a product is not worth handing to another thread.
SPLIT_MIN_BLOCKS = 4


class BlockMatrix:
    """Rows ``0 .. capacity-1`` of a (capacity x dimension) matrix (float32 unless told), in blocks."""

    def __init__(self, dimension: int, block_rows: int | None = None, dtype: type[np.generic] = np.float32) -> None:
        self.dimension = dimension
        self.block_rows = block_rows or BLOCK_ROWS
        self.dtype = dtype
        self.blocks: list[np.ndarray] = []

    @property
    def capacity(self) -> int:
        return len(self.blocks) * self.block_rows

    def reserve(self, rows: int) -> None:
        while self.capacity < rows:
            self.blocks.append(np.empty((self.block_rows, self.dimension), dtype=self.dtype))

    def put(self, start: int, matrix: np.ndarray) -> None:
        """Write ``matrix``'s rows at ``start ..`` (reserving blocks as needed)."""
        self.reserve(start + len(matrix))
        done = 0
        while done < len(matrix):
            block, offset = divmod(start + done, self.block_rows)
            take = min(self.block_rows - offset, len(matrix) - done)
            self.blocks[block][offset : offset + take] = matrix[done : done + take]
            done += take

    def adopt(self, rows: np.ndarray) -> None:
        """Hold ``rows`` (n x dimension, e.g. mapped from a file) as the first blocks, without copying
        them; only the last, partly filled block is copied (appends write into it)."""
        full = len(rows) // self.block_rows
        self.blocks = [rows[b * self.block_rows : (b + 1) * self.block_rows] for b in range(full)]
        tail = rows[full * self.block_rows :]
        if len(tail):
            block = np.empty((self.block_rows, self.dimension), dtype=self.dtype)
            block[: len(tail)] = tail
            self.blocks.append(block)

    def row(self, i: int) -> np.ndarray:
        block, offset = divmod(i, self.block_rows)
        return self.blocks[block][offset].copy()

    def snapshot(self) -> list[np.ndarray]:
        """The blocks as they are now; later appends only add blocks or fill rows past a reader's ``n``."""
        return list(self.blocks)


def rows_reaching(blocks: Sequence[np.ndarray], n: int, queries: np.ndarray,
                  thresholds: np.ndarray) -> list[np.ndarray]:
    """Per query (k x d), the ascending positions of rows ``0 .. n-1`` whose product with it reaches
    its threshold.

    Why rows-by-queries, block by block: for a narrow matrix (the 32 columns of ``score_bounds``)
    OpenBLAS computes ``block . queries.T`` faster than ``queries . block.T``, and testing each
    block's products while they are in cache, as one flat mask, is cheaper than a (k x n) score
    array tested query by query (docs/performance.md, 'Duplicate checks').
    """
    k = len(queries)
    if not n or not k:
        return [np.empty(0, dtype=np.int64) for _ in range(k)]
    block_rows = len(blocks[0])
    right = np.ascontiguousarray(np.asarray(queries, dtype=np.float32).T)
    limits = np.asarray(thresholds, dtype=np.float32)
    products = np.empty((block_rows, k), dtype=np.float32)
    reached = np.empty((block_rows, k), dtype=bool)
    hits = []
    for b, block in enumerate(blocks[: -(-n // block_rows)]):
        rows = min(block_rows, n - b * block_rows)
        np.matmul(block[:rows], right, out=products[:rows])
        np.greater_equal(products[:rows], limits, out=reached[:rows])
        hits.append(np.flatnonzero(reached[:rows]) + b * block_rows * k)
    positions, owners = np.divmod(np.concatenate(hits), k)
    order = np.argsort(owners, kind="stable")  # by query, rows still ascending within each
    ends = np.searchsorted(owners[order], np.arange(k + 1))
    positions = positions[order]
    return [positions[ends[q] : ends[q + 1]] for q in range(k)]


def over_blocks(blocks: Sequence[np.ndarray], n: int, helper: Executor | None,
                fill: Callable[[Sequence[np.ndarray], int, int], None]) -> None:
    """Call ``fill(blocks, first block number, block rows)`` over the blocks covering rows ``0 .. n-1``
    (n > 0): the second half on ``helper`` meanwhile, when given and there are ``SPLIT_MIN_BLOCKS``."""
    block_rows = len(blocks[0])
    used = list(blocks[: -(-n // block_rows)])
    if helper is None or len(used) < SPLIT_MIN_BLOCKS:
        fill(used, 0, block_rows)
        return
    half = len(used) // 2
    other = helper.submit(fill, used[half:], half, block_rows)
    fill(used[:half], 0, block_rows)
    other.result()
