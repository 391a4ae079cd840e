"""Every ranking option the quality bench reports, replayed on the vectors the service stored.

Methods are measured on LoCoMo and the bilingual set alike; the lexical weights of the options are
the ones that did best in a sweep (``sweep`` shows the default's), so each option is shown at its best.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from app.memory.ranking import COVERAGE_FLOOR, DEFAULT_LEXICAL_WEIGHTS, RankingOptions, terms, tokenize
from bench.data.bilingual import GROUPS
from bench.data.locomo import CATEGORY_NAMES
from bench.lab import ranking_variants as rv
from bench.lab.bm25 import BM25
from bench.lab.replay import DEPTH, K, LabQuery, LabScope, Method, evaluate, halve, pooled, reranked, vector_only
from bench.support.common import top_k
from bench.support.retrieval import Judged, summarise, typed_summary

SWEEP = (0.1, 0.3, 0.5, 0.7, 1.0)
RECENCY = (0.01, 0.03, 0.1)
_CATEGORY = {name: number for number, name in CATEGORY_NAMES.items()}


def locomo_summary(method: Method, scopes: Sequence[LabScope]) -> dict[str, dict[str, float]]:
    return summarise(Judged(_CATEGORY[label], ranked, relevant) for label, ranked, relevant in evaluate(method, scopes))


def bilingual_summary(method: Method, scope: LabScope | Sequence[LabScope]) -> dict[str, dict[str, float]]:
    return typed_summary(evaluate(method, [scope] if isinstance(scope, LabScope) else scope), GROUPS)


def bm25_only(tokenizer: Callable[[str], list[str]], b: float) -> Method:
    """BM25 over the whole scope (not only the candidates)."""
    indexes: dict[int, BM25] = {}

    def method(s: LabScope, q: LabQuery) -> list[int]:
        # By the rows' list, which a scope's halves share (a half's own id may be reused once it is freed).
        index = indexes.get(id(s.texts))
        if index is None:
            index = indexes[id(s.texts)] = BM25(s.texts, b=b, tokenizer=tokenizer)
        return top_k(index.scores(q.text), DEPTH).tolist()

    return method


def default_weight(model: str) -> float:
    return DEFAULT_LEXICAL_WEIGHTS.get(model, 0.0)


def methods(models: Sequence[str], weight: float | None = None) -> list[tuple[str, Method]]:
    """(name, method) of every option measured: references, the default, what was tried and dropped;
    ``weight`` replaces the first model's default lexical weight."""
    m = models[0]
    w = default_weight(m) if weight is None else weight
    gated = rv.gated(w, "language")
    out: list[tuple[str, Method]] = [
        ("bm25 (plain words, b 0.75)", bm25_only(tokenize, 0.75)),
        ("bm25 (stemmed, b 0)", bm25_only(terms, 0.0)),
        (f"before: {m} + {w} bm25/max, language gate with credit", pooled(m, gated)),
        (f"default: {m}, w {w}, coverage floor {COVERAGE_FLOOR}, language cap", reranked(m, RankingOptions(w))),
        ("  no coverage floor", reranked(m, RankingOptions(w, coverage_floor=0.0))),
        ("  coverage floor 0.1", reranked(m, RankingOptions(w, coverage_floor=0.1))),
        ("  coverage floor 0.2", reranked(m, RankingOptions(w, coverage_floor=0.2))),
        ("  no language cap", reranked(m, RankingOptions(w, language_cap=False))),
        ("  no language cap, no coverage floor", reranked(m, RankingOptions(w, language_cap=False,
                                                                           coverage_floor=0.0))),
        ("  keyword score = coverage itself", pooled(m, rv.covered(w, COVERAGE_FLOOR))),
        ("  floor per query (0.3: best coverage), no cap", pooled(m, rv.query_floor(w, 0.3))),
        ("  longer stop list (English, Chinese function bigrams)", pooled(m, rv.capped(w, COVERAGE_FLOOR,
                                                                                       tokenizer=rv.terms_stopped))),
        ("  reciprocal-rank fusion (k 60), scaled to 0..1", pooled(m, rv.rrf_bounded(60, 0.0))),
        ("  reciprocal-rank fusion (k 60), coverage floor 0.35", pooled(m, rv.rrf_bounded(60, 0.35))),
        ("  per-query z-scores: z(cos) + 1.5 z(bm25)", pooled(m, rv.zscore(1.5))),
        ("  + pseudo-relevance feedback (beta 0.5, top 2)", rv.prf(m, rv.capped(w, COVERAGE_FLOOR), 0.5, 2)),
    ]
    default = rv.capped(w, COVERAGE_FLOOR)
    out += [(f"  + recency {r} (half-life 30 days)", pooled(m, rv.with_recency(default, r))) for r in RECENCY]
    for other in models[1:]:
        wo = default_weight(other)
        out.append((f"{other}: pure vector", vector_only(other)))
        out.append((f"{other}, w {wo}, default ranking", reranked(other, RankingOptions(wo))))
        for share in (0.5, 0.8):
            out.append((f"ensemble {share} {m} + {1 - share:.1f} {other}, default ranking",
                        rv.ensemble((m, other), default, share)))
    return out


def run(models: Sequence[str], locomo: Sequence[LabScope], bilingual: LabScope,
        weight: float | None = None) -> list[dict[str, Any]]:
    """Both summaries of every method, on all queries and on each half."""
    def halves(method: Method) -> dict[str, Any]:
        return {f"{half}_{part}": summary(method, halve(scopes, half)) for half in ("even", "odd")
                for part, summary, scopes in (("locomo", locomo_summary, locomo), ("bilingual", bilingual_summary,
                                                                                     [bilingual]))}

    return [{"method": name, "locomo": locomo_summary(method, locomo),
             "bilingual": bilingual_summary(method, bilingual), **halves(method)}
            for name, method in methods(models, weight)]


def sweep(model: str, locomo: Sequence[LabScope], bilingual: LabScope) -> list[dict[str, Any]]:
    """The default ranking at other lexical weights: LoCoMo on all, even and odd conversations, and the
    bilingual set, to show how flat the choice is and that it holds on the half it was not read from."""
    rows = []
    for weight in SWEEP:
        method = reranked(model, RankingOptions(weight))
        row: dict[str, Any] = {"weight": weight}
        for half, scopes in (("all", locomo), ("even", locomo[0::2]), ("odd", locomo[1::2])):
            if scopes:
                row[f"locomo_{half}"] = locomo_summary(method, scopes)["all"]
        row["bilingual"] = bilingual_summary(method, bilingual)
        rows.append(row)
    return rows


def agreement(service_ranked: Sequence[Sequence[str]], method: Method, scopes: Sequence[LabScope]) -> float:
    """Share of queries whose top 10 the lab's replay orders exactly as the real service did."""
    replayed = [ranked for _, ranked, _ in evaluate(method, scopes)]
    same = [list(a[:K]) == list(b[:K]) for a, b in zip(service_ranked, replayed, strict=True)]
    return round(float(np.mean(same)), 4) if same else 0.0
