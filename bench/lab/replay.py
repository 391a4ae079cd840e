"""Ranking experiments replayed on the vectors the service stored, on LoCoMo and the bilingual set alike.

Each scope (one LoCoMo conversation, or the whole bilingual set) keeps its texts, the stored vectors
of every model and, per query, the query vectors and the keyword pool the service's keyword search
returns. A method turns (scope, query) into ranked row indices; ``evaluate`` keeps the first ``K``
distinct texts, as the service's lists do. The candidate pool is the service's: vector top-``POOL``
then the keyword-only rows, in that order, so a stable sort breaks ties as the service does (except
among keyword hits that tie on score and time, which the service meets in insertion order).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from app.memory import keyword
from app.memory.ranking import POOL, Candidate, RankingOptions, bm25_of_counts, keyword_query, rerank, terms
from bench.data.bilingual import BilingualSet, half
from bench.data.locomo import CATEGORY_NAMES, Conversation
from bench.lab.memory_reader import ArrayReader
from bench.support.common import top_k

K = 10
DEPTH = 3 * K  # rows a method returns, so K distinct texts remain after identical ones are collapsed


@dataclass
class LabQuery:
    text: str
    label: str  # LoCoMo category name or bilingual query type
    relevant: frozenset[str]
    vectors: dict[str, np.ndarray] = field(default_factory=dict)  # model -> unit query vector
    keyword_pool: list[int] = field(default_factory=list)  # row indices, keyword search order
    half: str = ""  # "even" (tuning) or "odd" (held out): LoCoMo by conversation, bilingual by query number


@dataclass
class LabScope:
    ids: list[str]
    texts: list[str]
    docs: dict[str, np.ndarray]  # model -> (rows, d) unit vectors
    timestamps: np.ndarray  # ms, 0 when unknown
    queries: list[LabQuery]
    _tokens: dict[str, list[Counter[str]]] = field(default_factory=dict)

    def tokens(self, name: str, tokenizer: Callable[[str], list[str]]) -> list[Counter[str]]:
        """Every row's token counts under ``tokenizer`` (computed once per tokenizer name)."""
        if name not in self._tokens:
            self._tokens[name] = [Counter(tokenizer(t)) for t in self.texts]
        return self._tokens[name]


Method = Callable[[LabScope, LabQuery], list[int]]


def make_scope(ids: Sequence[str], texts: Sequence[str], docs: dict[str, np.ndarray],
               queries: list[LabQuery], timestamps: Sequence[int] | None = None) -> LabScope:
    """A scope with every query's keyword pool filled by the service's own keyword search."""
    stamps = np.asarray(timestamps if timestamps is not None else [0] * len(ids), dtype=np.int64)
    reader = ArrayReader(ids, texts, next(iter(docs.values())), stamps.tolist())
    position = {memory_id: i for i, memory_id in enumerate(ids)}
    for query in queries:
        ranked = keyword.rank(reader, keyword_query(query.text), None, POOL)
        query.keyword_pool = [position[memory_id] for memory_id, _ in ranked]
    return LabScope(list(ids), list(texts), docs, stamps, queries)


def pool(cosines: np.ndarray, query: LabQuery, size: int = POOL) -> np.ndarray:
    """The service's candidates: vector top-``size``, then keyword-only rows."""
    vector = top_k(cosines, size).tolist()
    seen = set(vector)
    return np.array(vector + [i for i in query.keyword_pool if i not in seen], dtype=np.int64)


def pool_bm25(scope: LabScope, query: LabQuery, rows: np.ndarray, tokenizer: Callable[[str], list[str]] = terms,
              k1: float = 1.2, b: float = 0.0) -> np.ndarray:
    """``app.memory.ranking.bm25_scores`` over ``rows`` (statistics of the pool), from cached tokens."""
    counts = scope.tokens(tokenizer.__name__, tokenizer)
    return bm25_of_counts([counts[i] for i in rows], set(tokenizer(query.text)), k1, b)


def ordered(rows: np.ndarray, scores: np.ndarray) -> list[int]:
    """The top ``DEPTH`` rows by score, ties kept in pool order (the service's stable sort)."""
    return [int(rows[i]) for i in np.argsort(-scores, kind="stable")[:DEPTH]]


def vector_only(model: str) -> Method:
    return lambda s, q: top_k(s.docs[model] @ q.vectors[model], DEPTH).tolist()


Fusion = Callable[[LabScope, LabQuery, np.ndarray, np.ndarray], np.ndarray]


def pooled(model: str, fusion: Fusion) -> Method:
    """Pool as the service does, then order by ``fusion(scope, query, rows, cosines_of_rows)``."""

    def method(s: LabScope, q: LabQuery) -> list[int]:
        cosines = s.docs[model] @ q.vectors[model]
        rows = pool(cosines, q)
        return ordered(rows, fusion(s, q, rows, cosines[rows].astype(np.float64)))

    return method


def reranked(model: str, options: RankingOptions) -> Method:
    """What ``app.memory.hybrid`` does after its reads: the service's pool through ``ranking.rerank``."""

    def method(s: LabScope, q: LabQuery) -> list[int]:
        cosines = s.docs[model] @ q.vectors[model]
        rows = pool(cosines, q)
        candidates = [Candidate(str(i), s.texts[i], float(cosines[i])) for i in rows]
        return [int(c.id) for c, _ in rerank(q.text, candidates, options)[:DEPTH]]

    return method


def distinct(scope: LabScope, rows: Sequence[int]) -> list[int]:
    """The first ``K`` rows with identical texts kept once, as the service's result lists keep them."""
    seen: set[str] = set()
    out = []
    for i in rows:
        if scope.texts[i] not in seen:
            seen.add(scope.texts[i])
            out.append(i)
            if len(out) == K:
                break
    return out


def halve(scopes: Sequence[LabScope], half: str) -> list[LabScope]:
    """The scopes with only the queries of ``half`` (same rows, vectors and token cache)."""
    out = []
    for s in scopes:
        queries = [q for q in s.queries if q.half == half]
        if queries:
            out.append(LabScope(s.ids, s.texts, s.docs, s.timestamps, queries, s._tokens))
    return out


def evaluate(method: Method, scopes: Sequence[LabScope]) -> list[tuple[str, list[str], frozenset[str]]]:
    """(label, ranked ids, relevant ids) of every query of every scope, ``K`` distinct texts each."""
    return [(q.label, [s.ids[i] for i in distinct(s, method(s, q))], q.relevant) for s in scopes for q in s.queries]


Vectors = Callable[[str, str, Sequence[str]], np.ndarray]  # (model, "d" or "q", texts) -> unit vectors


def locomo_scopes(conversations: Sequence[Conversation], models: Sequence[str], vectors: Vectors) -> list[LabScope]:
    """One scope per conversation; labels are the question categories."""
    scopes = []
    for number, conv in enumerate(conversations):
        texts = [t.memory_text for t in conv.turns]
        qvecs = {m: vectors(m, "q", [q.question for q in conv.questions]) for m in models}
        queries = [LabQuery(q.question, CATEGORY_NAMES[q.category], q.evidence, {m: qvecs[m][i] for m in models},
                            half="even" if number % 2 == 0 else "odd")
                   for i, q in enumerate(conv.questions)]
        docs = {m: vectors(m, "d", texts) for m in models}
        scopes.append(make_scope([t.dia_id for t in conv.turns], texts, docs, queries,
                                 [t.timestamp_ms for t in conv.turns]))
    return scopes


def bilingual_scope(data: BilingualSet, models: Sequence[str], vectors: Vectors) -> LabScope:
    """The whole bilingual set as one scope; labels are the query types."""
    qvecs = {m: vectors(m, "q", [q.text for q in data.queries]) for m in models}
    queries = [LabQuery(q.text, q.type, q.relevant, {m: qvecs[m][i] for m in models}, half=half(q))
               for i, q in enumerate(data.queries)]
    docs = {m: vectors(m, "d", [mem.text for mem in data.memories]) for m in models}
    return make_scope([m.id for m in data.memories], [m.text for m in data.memories], docs, queries)
