"""Offline ranking experiments on the vectors the service stored: exact search, BM25, fusions, ensembles.

Every method returns the top-10 turn indices for one question of one conversation. Weights are
chosen on the even-numbered conversations and reported on the odd ones (held out) and on all, so a
"win" is not just a weight fitted to the test set.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from app.memory.ranking import POOL, Candidate, RankingOptions, lexical_bonus, rerank
from bench.data.locomo import Conversation
from bench.lab.bm25 import BM25
from bench.support.common import top_k
from bench.support.retrieval import Judged, summarise

K = 10
RRF_K = 60
WEIGHTS = (0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0)
Z_WEIGHTS = (0.1, 0.25, 0.5, 1.0, 1.5, 2.5)  # the ensemble fuses z-scores, whose spread is ~5x a cosine's


@dataclass
class Scope:
    """One conversation prepared for offline ranking."""

    conversation: Conversation
    bm25: np.ndarray  # (questions, turns)
    docs: dict[str, np.ndarray] = field(default_factory=dict)  # model -> (turns, d)
    queries: dict[str, np.ndarray] = field(default_factory=dict)  # model -> (questions, d)
    keyword_pools: list[list[int]] = field(default_factory=list)  # per question: turn indices from keyword search

    @property
    def dia_ids(self) -> list[str]:
        return [t.dia_id for t in self.conversation.turns]


Method = Callable[[Scope, int], np.ndarray]


def prepare(conversations: Sequence[Conversation]) -> list[Scope]:
    scopes = []
    for conversation in conversations:
        index = BM25([t.memory_text for t in conversation.turns])
        bm25 = np.stack([index.scores(q.question) for q in conversation.questions])
        scopes.append(Scope(conversation, bm25))
    return scopes


def _cos(scope: Scope, model: str, i: int) -> np.ndarray:
    return scope.docs[model] @ scope.queries[model][i]


def _z(scores: np.ndarray) -> np.ndarray:
    return (scores - scores.mean()) / (scores.std() + 1e-9)


def _ranks(scores: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """1-based rank of every item by descending score; items outside ``mask`` get no rank (inf)."""
    order = np.argsort(-scores, kind="stable")
    ranks = np.empty(len(scores), dtype=np.float64)
    ranks[order] = np.arange(1, len(scores) + 1)
    if mask is not None:
        ranks[~mask] = np.inf
    return ranks


def exact(model: str) -> Method:
    return lambda s, i: top_k(_cos(s, model, i), K)


def bm25_only() -> Method:
    return lambda s, i: top_k(s.bm25[i], K)


def rrf(model: str) -> Method:
    """Equal-weight reciprocal-rank fusion (the variant that hurt cross-language queries)."""

    def method(s: Scope, i: int) -> np.ndarray:
        lexical = s.bm25[i]
        fused = 1.0 / (RRF_K + _ranks(_cos(s, model, i))) + 1.0 / (RRF_K + _ranks(lexical, lexical > 0))
        return top_k(fused, K)

    return method


def hybrid(model: str, weight: float) -> Method:
    """cosine + weight * bm25/max over the whole scope."""
    return lambda s, i: top_k(_cos(s, model, i) + lexical_bonus(s.bm25[i], weight), K)


def pool_rerank(model: str, options: RankingOptions, pool: int = POOL) -> Method:
    """What the service would do: vector top-``pool``, then ``app.memory.ranking.rerank``."""

    def method(s: Scope, i: int) -> np.ndarray:
        scores = _cos(s, model, i)
        idx = top_k(scores, pool)
        turns = s.conversation.turns
        candidates = [Candidate(str(j), turns[j].memory_text, float(scores[j])) for j in idx]
        ranked = rerank(s.conversation.questions[i].question, candidates, options)
        return np.array([int(c.id) for c, _ in ranked[:K]], dtype=np.int64)

    return method


def union_rerank(model: str, options: RankingOptions, pool: int = POOL) -> Method:
    """Service-realistic hybrid: vector top-``pool`` ∪ the service's keyword hits, then ``rerank``."""

    def method(s: Scope, i: int) -> np.ndarray:
        scores = _cos(s, model, i)
        idx = list(dict.fromkeys([*top_k(scores, pool).tolist(), *s.keyword_pools[i]]))
        turns = s.conversation.turns
        candidates = [Candidate(str(j), turns[j].memory_text, float(scores[j])) for j in idx]
        ranked = rerank(s.conversation.questions[i].question, candidates, options)
        return np.array([int(c.id) for c, _ in ranked[:K]], dtype=np.int64)

    return method


def ensemble(models: Sequence[str], lexical_weight: float = 0.0) -> Method:
    """Sum of per-query z-scored cosines of several models (plus an optional lexical bonus)."""

    def method(s: Scope, i: int) -> np.ndarray:
        fused = sum(_z(_cos(s, m, i)) for m in models) / len(models)
        return top_k(np.asarray(fused) + lexical_bonus(s.bm25[i], lexical_weight), K)

    return method


def evaluate(method: Method, scopes: Sequence[Scope]) -> dict[str, dict[str, float]]:
    judged = []
    for scope in scopes:
        ids = scope.dia_ids
        for i, question in enumerate(scope.conversation.questions):
            ranked = [ids[j] for j in method(scope, i)]
            judged.append(Judged(question.category, ranked, question.evidence))
    return summarise(judged)


def split(scopes: Sequence[Scope]) -> tuple[list[Scope], list[Scope]]:
    """(tuning, held-out): even-numbered conversations tune, odd ones are held out."""
    return list(scopes[0::2]), list(scopes[1::2]) or list(scopes[0::2])


def sweep(make: Callable[[float], Method], scopes: Sequence[Scope], grid: Sequence[float] = WEIGHTS) -> list[dict]:
    """hit@1/5/10 for every weight on all conversations, to show how flat or peaked the choice is."""
    out = []
    for weight in grid:
        summary = evaluate(make(weight), scopes)["all"]
        out.append({"weight": weight, **{k: summary[k] for k in ("hit@1", "hit@5", "hit@10")}})
    return out


def tune(make: Callable[[float], Method], scopes: Sequence[Scope], grid: Sequence[float] = WEIGHTS) -> float:
    """The weight with the best mean of hit@1/5/10 on the tuning conversations."""
    tuning, _ = split(scopes)

    def objective(weight: float) -> float:
        summary = evaluate(make(weight), tuning)["all"]
        return summary["hit@1"] + summary["hit@5"] + summary["hit@10"]

    return max(grid, key=objective)
