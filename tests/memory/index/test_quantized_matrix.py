"""int8 codes with error bounds: the bound always holds, and the rescored top-k is the float32 top-k."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from app.memory.index.quantized_matrix import (
    Approximation,
    QuantizedMatrix,
    approximate,
    approximate_at,
    candidates,
    quantize,
)

DIM = 48


def _unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def _kinds(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    spiky = rng.standard_normal((50, DIM)) * 0.01
    spiky[:, 0] = 1.0  # one large coordinate: the scale is set by it, the rest rounds coarsely
    base = rng.standard_normal(DIM)
    return {
        "gaussian": _unit(rng.standard_normal((400, DIM))),
        "spiky": _unit(spiky),
        "clustered": _unit(base + 0.02 * rng.standard_normal((300, DIM))),  # near-duplicates of one vector
        "unnormalised": (rng.standard_normal((100, DIM)) * rng.uniform(0.1, 5, (100, 1))).astype(np.float32),
    }


@pytest.mark.parametrize("kind", ["gaussian", "spiky", "clustered", "unnormalised"])
def test_the_error_bound_holds_for_every_row_and_query(tmp_path: Path, kind: str) -> None:
    rows = _kinds(1)[kind]
    matrix = QuantizedMatrix(DIM, tmp_path, block_rows=32)
    matrix.put(0, rows)
    queries = np.vstack([_unit(np.random.default_rng(2).standard_normal((20, DIM))), rows[:5]])
    approx = approximate(matrix.snapshot(), len(rows), queries)
    exact = queries @ rows.T
    errors = np.stack([approx.errors(qi) for qi in range(len(queries))])
    assert approx.scores.shape == errors.shape == exact.shape
    assert np.all(np.abs(exact - approx.scores) <= errors)
    assert all(errors[qi].max() <= approx.widest_error(qi) for qi in range(len(queries)))


@pytest.mark.parametrize("queries", [1, 4])  # 4: packed, as a batch of duplicate checks is
@pytest.mark.parametrize("picks", ["none", "one", "scattered", "every"])
def test_scores_at_chosen_positions_equal_the_full_pass_across_blocks(tmp_path: Path, picks: str,
                                                                      queries: int) -> None:
    rows = _kinds(5)["gaussian"]
    matrix = QuantizedMatrix(DIM, tmp_path, block_rows=32)  # 400 rows: 13 blocks, the last one partial
    matrix.put(0, rows)
    rng = np.random.default_rng(6)
    positions = {"none": np.empty(0, dtype=np.int64), "one": np.array([399]),
                 "scattered": np.sort(rng.choice(len(rows), 57, replace=False)), "every": np.arange(len(rows))}[picks]
    block = _unit(rng.standard_normal((queries, DIM)))
    full = approximate(matrix.snapshot(), len(rows), block)
    at = approximate_at(matrix.snapshot(), positions, block)
    assert at.scores.shape == (queries, len(positions))
    for qi in range(queries):
        assert at.errors(qi).shape == (len(positions),)
        np.testing.assert_allclose(at.scores[qi], full.scores[qi][positions], rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(at.errors(qi), full.errors(qi, positions), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("batch", [2, 3, 5, 16, 33])
def test_a_batch_scores_exactly_what_its_queries_score_one_by_one(tmp_path: Path, batch: int) -> None:
    # From PACK_MIN_QUERIES on, the queries are packed for one matrix product per block.
    rows = _kinds(10)["unnormalised"]
    matrix = QuantizedMatrix(DIM, tmp_path, block_rows=16)  # 100 rows: 7 blocks, split with a helper
    matrix.put(0, rows)
    queries = _unit(np.random.default_rng(batch).standard_normal((batch, DIM)))
    with ThreadPoolExecutor(max_workers=1) as helper:
        together = approximate(matrix.snapshot(), len(rows), queries, helper)
    for i, query in enumerate(queries):
        alone = approximate(matrix.snapshot(), len(rows), query[None, :])
        np.testing.assert_array_equal(together.scores[i], alone.scores[0])
        np.testing.assert_array_equal(together.errors(i), alone.errors(0))


def test_codes_use_the_full_int8_range_and_store_the_norms(tmp_path: Path) -> None:
    rows = _kinds(3)["gaussian"][:10]
    codes, stats = quantize(rows)
    assert codes.dtype == np.int8 and np.all(np.abs(codes).max(axis=1) == 127)
    approx = codes.astype(np.float32) * stats[:, :1]
    np.testing.assert_allclose(stats[:, 1], np.linalg.norm(rows - approx, axis=1), rtol=1e-5)
    np.testing.assert_allclose(stats[:, 2], np.linalg.norm(approx, axis=1), rtol=1e-5)


def test_a_zero_or_non_finite_row_never_breaks_the_others(tmp_path: Path) -> None:
    rows = _kinds(4)["gaussian"][:6].copy()
    rows[1] = 0.0
    rows[2, 3] = np.nan
    codes, stats = quantize(rows)
    assert np.all(codes[1] == 0) and stats[1, 1] == 0.0
    assert np.isinf(stats[2, 1])  # an unknowable row always stays a candidate
    assert np.all(np.isfinite(stats[[0, 3, 4, 5]]))


@pytest.mark.parametrize("kind", ["gaussian", "spiky", "clustered", "unnormalised"])
@pytest.mark.parametrize("limit", [1, 10, 1000])
def test_rescored_candidates_give_the_exact_top_k_with_masks_and_thresholds(tmp_path: Path, kind: str,
                                                                             limit: int) -> None:
    rows = _kinds(5)[kind]
    matrix = QuantizedMatrix(DIM, tmp_path, block_rows=16)
    matrix.put(0, rows[:37])
    matrix.put(37, rows[37:])
    snap, n = matrix.snapshot(), len(rows)
    queries = np.vstack([_unit(np.random.default_rng(6).standard_normal((8, DIM))), rows[::40][:4]])
    rng = np.random.default_rng(7)
    with ThreadPoolExecutor(max_workers=1) as helper:
        approx = approximate(snap, n, queries, helper)
    for qi, query in enumerate(queries):
        exact = rows @ query
        for mask in (np.ones(n, dtype=bool), rng.random(n) < 0.3, np.zeros(n, dtype=bool)):
            for min_score in (None, 0.0, float(np.quantile(exact, 0.9))):
                found = candidates(approx, qi, mask, limit, min_score)
                rescored = snap.rows_at(found) @ query
                order = np.argsort(-rescored, kind="stable")[:limit]
                got = found[order][rescored[order] >= (min_score if min_score is not None else -np.inf)]
                allowed = np.flatnonzero(mask)
                best = allowed[np.argsort(-exact[allowed], kind="stable")][:limit]
                expected = best[exact[best] >= min_score] if min_score is not None else best
                assert got.tolist() == expected.tolist()
                assert np.all(np.diff(found) > 0)  # ascending, as the row file reads them
                assert found.tolist() == _every_candidate(approx, qi, mask, limit, min_score).tolist()


def _every_candidate(approx: Approximation, qi: int, mask: np.ndarray, limit: int,
                     min_score: float | None) -> np.ndarray:
    """The definition, with bounds for every row: upper bound at least the limit-th largest lower bound."""
    k = min(limit, int(mask.sum()))
    if k == 0:
        return np.empty(0, dtype=np.int64)
    errors = approx.errors(qi)
    lower = np.where(mask, approx.scores[qi] - errors, -np.inf)
    floor = max(np.sort(lower)[-k], min_score if min_score is not None else -np.inf)
    return np.flatnonzero(mask & (approx.scores[qi] + errors >= floor))


def test_candidates_are_few_when_scores_are_spread(tmp_path: Path) -> None:
    rows = _unit(np.random.default_rng(8).standard_normal((4000, DIM)))
    matrix = QuantizedMatrix(DIM, tmp_path)
    matrix.put(0, rows)
    query = rows[17] + 0.0
    approx = approximate(matrix.snapshot(), len(rows), query[None, :])
    found = candidates(approx, 0, np.ones(len(rows), dtype=bool), 10)
    assert 10 <= len(found) < 400 and 17 in found


def test_a_row_reads_back_exactly_after_being_quantized(tmp_path: Path) -> None:
    rows = _kinds(9)["spiky"]
    matrix = QuantizedMatrix(DIM, tmp_path, block_rows=8)
    matrix.put(0, rows)
    np.testing.assert_array_equal(matrix.row(13), rows[13])
    np.testing.assert_array_equal(matrix.rows_at(np.array([0, 8, 49])), rows[[0, 8, 49]])
    assert matrix.capacity == 56 and matrix.row_bytes == DIM + 12
