"""A float32 row matrix stored as fixed-size blocks, so it grows without ever being copied.

Why: one contiguous matrix must be reallocated to grow, and ``np.resize`` holds the old and the
new copy at once: at 100k x 512 that is 200 MB + 300 MB for a moment, which was the server's RSS
peak under writes. Blocks of ``BLOCK_ROWS`` rows are only ever appended; the unused tail is at
most one block (8 MB at 512-d). A product over the blocks costs what one over the whole matrix
costs (each block is still thousands of rows, well past where BLAS reaches full speed).

Not thread-safe on its own: ``VectorCache`` serialises writers and hands searches a ``snapshot``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

BLOCK_ROWS = 4_096


class BlockMatrix:
    """Rows ``0 .. capacity-1`` of a (capacity x dimension) float32 matrix, in blocks."""

    def __init__(self, dimension: int, block_rows: int | None = None) -> None:
        self.dimension = dimension
        self.block_rows = block_rows or BLOCK_ROWS
        self.blocks: list[np.ndarray] = []

    @property
    def capacity(self) -> int:
        return len(self.blocks) * self.block_rows

    def reserve(self, rows: int) -> None:
        while self.capacity < rows:
            self.blocks.append(np.empty((self.block_rows, self.dimension), dtype=np.float32))

    def put(self, start: int, matrix: np.ndarray) -> None:
        """Write ``matrix``'s rows at ``start ..`` (reserving blocks as needed)."""
        self.reserve(start + len(matrix))
        done = 0
        while done < len(matrix):
            block, offset = divmod(start + done, self.block_rows)
            take = min(self.block_rows - offset, len(matrix) - done)
            self.blocks[block][offset : offset + take] = matrix[done : done + take]
            done += take

    def row(self, i: int) -> np.ndarray:
        block, offset = divmod(i, self.block_rows)
        return self.blocks[block][offset].copy()

    def snapshot(self) -> list[np.ndarray]:
        """The blocks as they are now; later appends only add blocks or fill rows past a reader's ``n``."""
        return list(self.blocks)

    def take_blocks(self) -> list[np.ndarray]:
        """Hand the blocks over (this matrix becomes empty), so a rebuild can free them one by one."""
        blocks, self.blocks = self.blocks, []
        return blocks


def scores_of(blocks: Sequence[np.ndarray], n: int, queries: np.ndarray) -> np.ndarray:
    """``queries (k x d) . rows[:n].T`` as a (k x n) float32 array, one BLAS product per block."""
    out = np.empty((len(queries), n), dtype=np.float32)
    if n == 0:
        return out
    block_rows = len(blocks[0])
    for b, block in enumerate(blocks):
        start = b * block_rows
        if start >= n:
            break
        stop = min(n, start + block_rows)
        np.matmul(queries, block[: stop - start].T, out=out[:, start:stop])
    return out
