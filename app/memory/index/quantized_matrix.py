"""The vector cache's rows as int8 codes in memory, with exact float32 copies on disk, searched exactly.

Why: a float32 matrix was the largest part of the server's memory. Each row ``v`` is kept as
codes ``c = round(v / s)`` with one scale ``s = max|v| / 127`` per row (a quarter of the memory),
and its float32 values go to a ``RowFile``. SIMD int8 products (numkong) score every row in a
fraction of the time numpy's float32 product takes on this machine, and a batch of queries in
little more: packed once, the queries are multiplied with each block of codes as one int8 matrix
product that reuses every loaded row across them, where a pass per query reads every row again
(docs/performance.md, 'int8 codes and the exact rescore').

Exactness: with ``v~ = s c`` and the query ``q~`` quantized the same way,

    |q . v - q~ . v~|  <=  |q| |v - v~| + |q - q~| |v~|                        (Cauchy-Schwarz)

so each row's approximate score comes with a bound on its error (the two row norms are stored).
The top ``k`` rows all have upper bounds at least the ``k``-th largest lower bound; only those rows
(rarely more than a few dozen on the benchmark's corpus) are read back from the file and scored in
float32. The answer is the exact float32 top-k whatever the data; near-duplicates only make more
rows qualify.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Executor
from pathlib import Path
from typing import NamedTuple

import numkong
import numpy as np

from app.memory.index.block_matrix import BlockMatrix, over_blocks
from app.memory.index.row_file import BaseRows, RowFile

CODE_MAX = 127
#: float32 rounding in the scores and norms (~1e-7 each): a wider net only adds candidates.
SLACK = 1e-5
SCALE, RESIDUAL, CODE_NORM = 0, 1, 2  # columns of the per-row statistics
#: From this many queries on, the packed matrix product beats a dot-product pass per query (2: a tie).
PACK_MIN_QUERIES = 3


class Snapshot(NamedTuple):
    """What a search reads, as of one moment: rows past a reader's ``n`` may change, earlier ones not."""

    codes: list[np.ndarray]
    stats: list[np.ndarray]
    exact: RowFile

    def rows_at(self, positions: np.ndarray) -> np.ndarray:
        """The float32 rows at ascending ``positions``."""
        return self.exact.read(positions)


class QuantizedMatrix:
    """Rows ``0 .. capacity-1``; not thread-safe on its own (``VectorCache`` serialises writers)."""

    def __init__(self, dimension: int, directory: Path | None = None, block_rows: int | None = None,
                 base: BaseRows | None = None) -> None:
        self.dimension = dimension
        self.codes = BlockMatrix(dimension, block_rows, dtype=np.int8)
        self.block_rows = self.codes.block_rows
        self.stats = BlockMatrix(3, self.block_rows)
        self.exact = RowFile(dimension, directory, base)

    @classmethod
    def restored(cls, dimension: int, directory: Path | None, codes: np.ndarray, stats: np.ndarray,
                 base: BaseRows) -> QuantizedMatrix:
        """Rows saved by ``index_file``: codes and statistics mapped from the file, exact rows read from it."""
        matrix = cls(dimension, directory, base=base)
        matrix.codes.adopt(codes)
        matrix.stats.adopt(stats)
        return matrix

    @property
    def capacity(self) -> int:
        return self.codes.capacity

    @property
    def row_bytes(self) -> int:
        """Resident bytes a row costs."""
        return self.dimension + 3 * 4

    def reserve(self, rows: int) -> None:
        self.codes.reserve(rows)
        self.stats.reserve(rows)

    def put(self, start: int, matrix: np.ndarray) -> None:
        """Write ``matrix``'s rows at ``start ..``.

        Raises:
            OSError: the row file could not be written (then rows ``start ..`` are undefined).
        """
        matrix = np.ascontiguousarray(matrix, dtype=np.float32)
        self.exact.write(start, matrix)
        codes, stats = quantize(matrix)
        self.codes.put(start, codes)
        self.stats.put(start, stats)

    def row(self, i: int) -> np.ndarray:
        return self.exact.read(np.array([i]))[0]

    def rows_at(self, positions: np.ndarray) -> np.ndarray:
        return self.exact.read(positions)

    def snapshot(self) -> Snapshot:
        return Snapshot(self.codes.snapshot(), self.stats.snapshot(), self.exact)


def quantize(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Codes (int8) and statistics ``[scale, |v - v~|, |v~|]`` (float32) of each row of ``matrix``."""
    finite = np.nan_to_num(matrix, nan=0.0, posinf=0.0, neginf=0.0)
    peak = np.abs(finite).max(axis=1) if finite.shape[1] else np.zeros(len(finite), dtype=np.float32)
    scale = np.where(peak > 0, peak / CODE_MAX, 1.0).astype(np.float32)
    codes = np.clip(np.rint(finite / scale[:, None]), -CODE_MAX, CODE_MAX).astype(np.int8)
    approx = codes.astype(np.float32) * scale[:, None]
    residual = np.linalg.norm(matrix - approx, axis=1)  # a non-finite row gets an infinite bound
    stats = np.stack([scale, np.where(np.isfinite(residual), residual, np.inf),
                      np.linalg.norm(approx, axis=1)], axis=1)
    return codes, stats.astype(np.float32)


class Approximation(NamedTuple):
    """Per query (rows) and matrix row (columns): approximate scores, and their error bounds on demand.

    Bounds are computed only for the rows that need them (``candidates``): for every row and query
    they were a sizeable share of a batch's time (docs/performance.md, 'int8 codes and the exact rescore').
    """

    scores: np.ndarray  # (queries x rows)
    query_norms: np.ndarray  # |q| per query
    query_residuals: np.ndarray  # |q - q~| per query
    rows: np.ndarray  # the rows' statistics (rows x 3)
    row_maxima: tuple[float, float]  # the largest |v - v~| and |v~| over the rows

    def errors(self, qi: int, at: np.ndarray | slice = slice(None)) -> np.ndarray:
        """Bounds on |exact - approximate| for query ``qi``'s scores of rows ``at``."""
        rows = self.rows[at]
        return self.query_norms[qi] * rows[:, RESIDUAL] + self.query_residuals[qi] * rows[:, CODE_NORM] + SLACK

    def widest_error(self, qi: int) -> float:
        """A bound on every row's error for query ``qi``."""
        residual, code_norm = self.row_maxima
        return float(self.query_norms[qi] * residual + self.query_residuals[qi] * code_norm + SLACK)


def approximate(snap: Snapshot, n: int, queries: np.ndarray, helper: Executor | None = None) -> Approximation:
    """Scores of rows ``0 .. n-1`` for each of ``queries`` (k x d float32), with error bounds.

    One int8 product per block; with a ``helper`` the second half of the blocks runs there meanwhile
    (numkong releases the GIL).
    """
    codes, stats = quantize(queries)
    packed = _packed(codes)
    products = np.empty((n, len(queries)), dtype=np.float32)  # (rows x queries): each block's slice is contiguous
    rows = np.empty((n, 3), dtype=np.float32)

    def fill(blocks: Sequence[np.ndarray], first: int, block_rows: int) -> None:
        for b, block in enumerate(blocks, start=first):
            start = b * block_rows
            stop = min(n, start + block_rows)
            products[start:stop] = _products(block[: stop - start], codes, packed)
            rows[start:stop] = snap.stats[b][: stop - start]

    if n:
        over_blocks(snap.codes, n, helper, fill)
    return _bounded(products, rows, queries, stats)


def approximate_at(snap: Snapshot, positions: np.ndarray, queries: np.ndarray) -> Approximation:
    """Scores of ``queries`` (k x d) at ascending ``positions`` only, with error bounds: codes gathered
    from memory once for the whole batch.

    Why: a threshold search's projected bounds leave tens to hundreds of candidates, and reading all
    of them back from the row file cost a good share of a core under heavy writes. Their codes narrow
    them to the few whose score can still reach the threshold first. One gather for a batch's
    candidates together: gathered per query, the per-block copies dominated a duplicate check
    (docs/performance.md, 'Duplicate checks').
    """
    positions = np.asarray(positions, dtype=np.int64)
    gathered = np.empty((len(positions), queries.shape[-1]), dtype=np.int8)
    rows = np.empty((len(positions), 3), dtype=np.float32)
    if len(positions):
        block_rows = len(snap.codes[0])
        # Positions ascend, so each block's share is one slice: one gather per block, no masks.
        cuts = np.searchsorted(positions, np.arange(len(snap.codes) + 1) * block_rows).tolist()
        for b, (lo, hi) in enumerate(zip(cuts[:-1], cuts[1:], strict=True)):
            if lo < hi:
                offsets = positions[lo:hi] - b * block_rows
                np.take(snap.codes[b], offsets, axis=0, out=gathered[lo:hi])
                np.take(snap.stats[b], offsets, axis=0, out=rows[lo:hi])
    queries = np.asarray(queries, dtype=np.float32).reshape(-1, gathered.shape[1])
    codes, stats = quantize(queries)
    products = np.zeros((len(positions), len(queries)), dtype=np.float32)
    if len(positions):
        products[:] = _products(gathered, codes, _packed(codes))
    return _bounded(products, rows, queries, stats)


def _packed(codes: np.ndarray) -> numkong.PackedMatrix | None:
    """The query codes packed for one matrix product per block, from ``PACK_MIN_QUERIES`` queries on."""
    return numkong.dots_pack(codes, dtype="int8") if len(codes) >= PACK_MIN_QUERIES else None


def _products(codes: np.ndarray, queries: np.ndarray, packed: numkong.PackedMatrix | None) -> np.ndarray:
    """``codes . queries.T`` (rows x queries), exact integers: one product of the packed queries, else dot products."""
    if packed is None:
        return np.asarray(numkong.cdist(codes, queries, metric="dot", out_dtype="float32"))
    return np.asarray(numkong.dots_packed(codes, packed))


def _bounded(products: np.ndarray, rows: np.ndarray, queries: np.ndarray, stats: np.ndarray) -> Approximation:
    """Scale code products (rows x queries) into scores, with what their error bounds need."""
    scores = products.T * (stats[:, SCALE, None] * rows[:, SCALE])
    maxima = (float(rows[:, RESIDUAL].max()), float(rows[:, CODE_NORM].max())) if len(rows) else (0.0, 0.0)
    return Approximation(scores, np.linalg.norm(queries, axis=1), stats[:, RESIDUAL], rows, maxima)


def candidates(approx: Approximation, qi: int, mask: np.ndarray, limit: int,
               min_score: float | None = None) -> np.ndarray:
    """Ascending positions of the allowed rows that may be among query ``qi``'s ``limit`` best (and reach
    ``min_score``): those whose upper bound reaches the ``limit``-th largest lower bound.

    Bounds are needed near the top only. With ``w`` the widest error and ``s_k`` the ``limit``-th best
    approximate score, each of those ``limit`` rows has a lower bound of at least ``s_k - w``, so a row
    scoring below ``s_k - 2w`` (or below ``min_score - w``) has an upper bound below the floor.
    """
    scores = approx.scores[qi]
    allowed = scores[mask]
    k = min(limit, len(allowed))
    if k <= 0:
        return np.empty(0, dtype=np.int64)
    # Only the allowed scores are partitioned: padded with -inf for the rest, the many equal values
    # made the selection an order of magnitude slower (docs/performance.md, 'int8 codes and the exact rescore').
    kth = float(np.partition(allowed, len(allowed) - k)[len(allowed) - k])
    widest = approx.widest_error(qi)
    reach = kth - 2 * widest
    if min_score is not None:
        reach = max(reach, min_score - widest)
    near = np.flatnonzero(mask & (scores >= reach))
    near_scores, errors = scores[near], approx.errors(qi, near)
    lower = near_scores - errors
    floor = float(np.partition(lower, len(lower) - k)[len(lower) - k]) if len(lower) >= k else -np.inf
    if min_score is not None:
        floor = max(floor, min_score)
    return near[near_scores + errors >= floor].astype(np.int64)
