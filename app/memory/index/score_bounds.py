"""Exact upper bounds on cosine scores from a low-rank projection, so a threshold search scores few rows.

Why: every remember asks "is any row of this scope at least 0.85 similar?". Answered with a full
product, duplicate checks alone would need most of this machine's two cores at the target write rate
(docs/performance.md, 'Duplicate checks').

For vectors q, x, an orthonormal basis P (d x k) and the residuals r = v - P P^T v,

    q . x = (P^T q) . (P^T x) + r_q . r_x  <=  (P^T q) . (P^T x) + |r_q| |r_x|     (Cauchy-Schwarz)

so with each row stored as ``[P^T x, |r_x|]`` one (b x (k+1)) . ((k+1) x n) product bounds every
row's score, and only the rows whose bound reaches the threshold are scored exactly. The bound
holds for any basis: results are exact whatever the data. P is the rows' top principal directions
only so that the bound is tight: with k = ``RANK`` it leaves a small fraction of the rows as
candidates (docs/performance.md, 'Duplicate checks'), which ``quantized_matrix.approximate_at``
narrows further.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from app.memory.index.block_matrix import BlockMatrix, rows_reaching

RANK = 31  # plus the residual column: 32 floats a row, 12.5 MB at 100k
FIT_MIN_ROWS = 2_048  # the cache fits a basis at this many rows; below, a full product costs next to nothing
FIT_SAMPLE_ROWS = 8_192
SLACK = 1e-3  # float32 rounding in two products; a wider net only adds candidates


class ScoreBounds:
    """Projected rows ``0 .. n-1`` of one matrix; not thread-safe (``VectorCache`` serialises it)."""

    def __init__(self, dimension: int, basis: np.ndarray | None = None) -> None:
        self.dimension = dimension
        self.basis = basis  # (dimension x RANK), or None until fitted
        self._rows = BlockMatrix(RANK + 1)
        self.n = 0

    def put(self, start: int, matrix: np.ndarray) -> None:
        """Project rows written at ``start ..``; a gap (which writers never leave) disables the bounds."""
        if self.basis is None or start != self.n:
            return
        self._rows.put(start, self.project(matrix))
        self.n += len(matrix)

    def fit(self, rows_at: Callable[[np.ndarray], np.ndarray], n: int) -> None:
        """Choose the basis from a sample of the first ``n`` rows, then project all of them.

        ``rows_at(ascending positions)`` reads the rows (float32).
        """
        picks = np.unique(np.linspace(0, n - 1, min(n, FIT_SAMPLE_ROWS)).astype(np.int64))
        sample = rows_at(picks).astype(np.float64)
        _, vectors = np.linalg.eigh(sample.T @ sample)  # eigenvalues ascending
        self.basis = np.ascontiguousarray(vectors[:, ::-1][:, :RANK], dtype=np.float32)
        self._rows, self.n = BlockMatrix(RANK + 1), 0
        step = self._rows.block_rows
        for start in range(0, n, step):
            self.put(start, rows_at(np.arange(start, min(n, start + step))))

    def project(self, matrix: np.ndarray) -> np.ndarray:
        assert self.basis is not None  # noqa: S101 - callers check
        projected = matrix @ self.basis
        residual = np.einsum("ij,ij->i", matrix, matrix) - np.einsum("ij,ij->i", projected, projected)
        return np.hstack([projected, np.sqrt(np.maximum(residual, 0.0))[:, None]]).astype(np.float32, copy=False)

    def snapshot(self, n: int) -> list[np.ndarray] | None:
        """The projected blocks covering rows ``0 .. n-1``, or None when the bounds cannot serve."""
        return self._rows.snapshot() if self.basis is not None and self.n >= n else None


def candidates(bounds: list[np.ndarray], basis: np.ndarray, n: int, queries: np.ndarray,
               thresholds: np.ndarray) -> list[np.ndarray]:
    """Per query, the rows whose score may reach its threshold (sorted positions)."""
    projector = ScoreBounds(basis.shape[0], basis)
    return rows_reaching(bounds, n, projector.project(queries), np.asarray(thresholds, dtype=np.float32) - SLACK)

