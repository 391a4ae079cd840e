"""Exact top-k from int8 approximations: which rows can still be in a query's top, read back and rescored
in float32. Threshold searches (duplicate checks) first narrow their rows with projected score bounds."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from app.memory.index import quantized_matrix
from app.memory.index.quantized_matrix import Approximation, Snapshot
from app.memory.index.score_bounds import candidates

#: Past this share of a scope's rows as candidates, one full product is cheaper than gathering them.
MAX_CANDIDATE_SHARE = 0.05
#: A batch's candidates are gathered together up to this share of the rows (and ``MAX_CANDIDATE_SHARE``
#: per query). Why: a full product costs more with every query it serves, a gather only with the rows,
#: so a batch of checks can gather far more rows than one check before the full product is cheaper; a
#: lower cap sent batches to the full product needlessly (docs/performance.md, 'Duplicate checks').
MAX_UNION_SHARE = 0.25


class Query(NamedTuple):
    vector: np.ndarray  # unit query vector
    scope: str | None  # None: every scope
    limit: int
    min_score: float | None = None  # only rows scoring at least this (duplicate checks)
    columns: tuple[str, ...] | None = None  # only these row columns (None: all); a duplicate check needs the id


def with_cosines(rows: Sequence[dict[str, Any]], stored: np.ndarray, vector: np.ndarray) -> list[dict[str, Any]]:
    """Each row with ``score`` = the cosine of its vector (``stored``, one per row) with ``vector``;
    rows whose vector has no direction are left out."""
    query = np.asarray(vector, dtype=np.float64).reshape(-1)
    query = query / max(float(np.linalg.norm(query)), 1e-12)
    matrix = np.asarray(stored, dtype=np.float64)
    norms = np.linalg.norm(matrix, axis=1)
    scores = (matrix @ query) / np.maximum(norms, 1e-12)
    return [{**row, "score": float(score)} for row, score, norm in zip(rows, scores, norms, strict=True) if norm > 0]


Top = tuple[np.ndarray, np.ndarray]  # (row positions, their scores), best first


def threshold_tops(snap: Snapshot, bounds: list[np.ndarray] | None, basis: np.ndarray | None, n: int,
                    block: np.ndarray, asked: list[Query], masks: list[np.ndarray | None]) -> list[Top | None]:
    """Answers of the ``min_score`` searches the bounds can serve; None where a full product is needed.

    The projected bounds' candidates are narrowed by their int8 scores (codes are in memory) before
    any row is read back from the row file, all the batch's candidates in one gather.
    """
    found: list[Top | None] = [None] * len(asked)
    bounded = [qi for qi, q in enumerate(asked) if q.min_score is not None]
    if bounds is None or basis is None or not bounded:
        return found
    thresholds = np.array([asked[qi].min_score for qi in bounded], dtype=np.float32)
    chosen: dict[int, np.ndarray] = {}
    for qi, positions in zip(bounded, candidates(bounds, basis, n, block[bounded], thresholds), strict=True):
        mask = masks[qi]
        if mask is None:
            found[qi] = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32))
        elif len(positions := positions[mask[positions]]) <= MAX_CANDIDATE_SHARE * n:
            chosen[qi] = positions  # else a low threshold: the full product is cheaper
    if not chosen:
        return found
    union = np.unique(np.concatenate(list(chosen.values())))
    if len(union) > min(MAX_UNION_SHARE, MAX_CANDIDATE_SHARE * len(chosen)) * n:
        return found  # together too many to gather: one full product serves them all
    approx = quantized_matrix.approximate_at(snap, union, block[list(chosen)])
    for row, (qi, positions) in enumerate(chosen.items()):
        own = np.zeros(len(union), dtype=bool)
        own[np.searchsorted(union, positions)] = True
        keep = quantized_matrix.candidates(approx, row, own, asked[qi].limit, asked[qi].min_score)
        found[qi] = _rescored(snap, union[keep], asked[qi])
    return found


def best(snap: Snapshot, approx: Approximation, qi: int, mask: np.ndarray | None, query: Query) -> Top:
    """The exact top of query ``qi``, from its approximate scores: only the candidates are read and rescored."""
    if mask is None:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
    return _rescored(snap, quantized_matrix.candidates(approx, qi, mask, query.limit, query.min_score), query)


def _rescored(snap: Snapshot, positions: np.ndarray, query: Query) -> Top:
    """The best ``limit`` of ``positions`` (ascending) by float32 score, ties in row order."""
    scores = snap.rows_at(positions) @ np.asarray(query.vector, dtype=np.float32).reshape(-1)
    order = np.argsort(-scores, kind="stable")[: query.limit]
    if query.min_score is not None:
        order = order[scores[order] >= query.min_score]
    return positions[order], scores[order]
