"""Recall@k aggregation for LoCoMo: overall and per question category, in both definitions."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from bench.data.locomo import CATEGORY_NAMES
from bench.exact import fraction_at_k, hit_at_k

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


def reciprocal_rank(ranked: Sequence[str], relevant: frozenset[str]) -> float:
    """1 / rank of the first relevant item, 0 when none is in the list."""
    return next((1.0 / rank for rank, item in enumerate(ranked, 1) if item in relevant), 0.0)


def typed_summary(judged: Iterable[tuple[str, Sequence[str], frozenset[str]]],
                  groups: dict[str, Sequence[str]] | None = None) -> dict[str, dict[str, float]]:
    """MRR and R@1/5/10 (share of the relevant items in the top k) per query type, for every type,
    for named groups of types (e.g. cross-language) and for 'all'."""
    items = list(judged)
    by_type: dict[str, list[tuple[Sequence[str], frozenset[str]]]] = defaultdict(list)
    for kind, ranked, relevant in items:
        by_type[kind].append((ranked, relevant))
        by_type["all"].append((ranked, relevant))
    for name, kinds in (groups or {}).items():
        by_type[name] = [pair for kind in kinds for pair in by_type.get(kind, [])]
    out = {}
    for kind, pairs in by_type.items():
        n = len(pairs)
        if not n:
            continue  # a group none of whose types is among these queries
        row: dict[str, float] = {"n": n, "mrr": round(sum(reciprocal_rank(r, rel) for r, rel in pairs) / n, 4)}
        for k in KS:
            row[f"r@{k}"] = round(sum(fraction_at_k(r, rel, k) for r, rel in pairs) / n, 4)
        out[kind] = row
    return out
