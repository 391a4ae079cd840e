"""A row matrix stored as fixed-size blocks, so it grows without ever being copied.

Why: one contiguous matrix must be reallocated to grow, and ``np.resize`` holds the old and the
new copy at once: at 100k x 512 that is 200 MB + 300 MB for a moment, which was the server's RSS
peak under writes. Blocks of ``BLOCK_ROWS`` rows are only ever appended; the unused tail is at
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

    def row(self, i: int) -> np.ndarray:
        block, offset = divmod(i, self.block_rows)
        return self.blocks[block][offset].copy()

    def snapshot(self) -> list[np.ndarray]:
        """The blocks as they are now; later appends only add blocks or fill rows past a reader's ``n``."""
        return list(self.blocks)


def scores_of(blocks: Sequence[np.ndarray], n: int, queries: np.ndarray, helper: Executor | None = None) -> np.ndarray:
    """``queries (k x d) . rows[:n].T`` as a (k x n) float32 array, one BLAS product per block.

    With a ``helper`` and at least ``SPLIT_MIN_BLOCKS`` blocks, the helper thread computes the second
    half of the columns while the caller computes the first (numpy releases the GIL in BLAS).
    """
    k = len(queries)
    padded = _padded(queries)
    out = np.empty((len(padded), n), dtype=np.float32)
    if n:
        over_blocks(blocks, n, helper, lambda part, first, block_rows: _fill(out, padded, part, first, block_rows, n))
    return out[:k]


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


def _padded(queries: np.ndarray) -> np.ndarray:
    """Queries padded with zero rows to a multiple of 4 (from 3 rows up).

    Why: OpenBLAS's sgemm (Haswell kernels, as it picks on this machine's AMD EPYC) is slow for
    row counts that are not multiples of 4. Measured at 100k x 512 on one thread: 1 row 7-10 ms,
    2 rows 24-27, 3 rows 30-33, 4 rows 22-23, 5-7 rows 29-37, 8 rows 26-28. Two rows go as two
    matrix-vector products instead (see ``_fill``).
    """
    k = len(queries)
    if k < 3 or k % 4 == 0:
        return queries
    padded = np.zeros((k + (-k) % 4, queries.shape[1]), dtype=queries.dtype)
    padded[:k] = queries
    return padded


def _fill(out: np.ndarray, queries: np.ndarray, blocks: Sequence[np.ndarray], first: int, block_rows: int,
          n: int) -> None:
    """Write the columns of ``blocks`` (block numbers ``first ..``) into ``out``."""
    pair = len(queries) == 2
    for b, block in enumerate(blocks, start=first):
        start = b * block_rows
        stop = min(n, start + block_rows)
        rows = block[: stop - start]
        if pair:
            np.matmul(rows, queries[0], out=out[0, start:stop])
            np.matmul(rows, queries[1], out=out[1, start:stop])
        else:
            np.matmul(queries, rows.T, out=out[:, start:stop])
