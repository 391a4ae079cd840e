"""Recall@k aggregation for LoCoMo: overall and per question category, in both definitions."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from bench.exact import fraction_at_k, hit_at_k
from bench.locomo_data import CATEGORY_NAMES

KS = (1, 5, 10)


@dataclass(frozen=True)
class Judged:
    """One question's ranked result ids next to its evidence ids."""

    category: int
    ranked: Sequence[str]
    evidence: frozenset[str]


def _summary(items: Sequence[Judged]) -> dict[str, float]:
    n = len(items)
    out: dict[str, float] = {"n": n}
    for k in KS:
        out[f"hit@{k}"] = round(sum(hit_at_k(j.ranked, j.evidence, k) for j in items) / n, 4) if n else 0.0
        out[f"frac@{k}"] = round(sum(fraction_at_k(j.ranked, j.evidence, k) for j in items) / n, 4) if n else 0.0
    return out


def summarise(judged: Iterable[Judged]) -> dict[str, dict[str, float]]:
    """{'all': {...}, 'multi-hop': {...}, ...}; hit@k = any evidence in top-k, frac@k = mean evidence share."""
    items = list(judged)
    by_category: dict[str, list[Judged]] = defaultdict(list)
    for item in items:
        by_category[CATEGORY_NAMES.get(item.category, str(item.category))].append(item)
    result = {"all": _summary(items)}
    for name in CATEGORY_NAMES.values():
        if by_category.get(name):
            result[name] = _summary(by_category[name])
    return result
