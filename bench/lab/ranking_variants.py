"""The ranking variants the quality bench measures, replayed by ``bench/lab/replay.py`` on stored vectors.

Each ``Fusion`` orders one query's candidate pool (the service's: vector top-50, then keyword-only
rows). ``app.memory.ranking`` holds only what won; the others stay here so their numbers can be re-run.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from app.memory.ranking import has_identifier, language, language_cap, lexical_bonus, same_language, terms, tokenize
from bench.lab.replay import Fusion, LabQuery, LabScope, Method, ordered, pool, pool_bm25

MS_PER_DAY = 86_400_000.0
Tokenizer = Callable[[str], list[str]]
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")


def _z(values: np.ndarray) -> np.ndarray:
    spread = float(values.std())
    return (values - values.mean()) / spread if spread > 0 else np.zeros_like(values)


def _unit(values: np.ndarray) -> np.ndarray:
    spread = float(values.max() - values.min())
    return (values - values.min()) / spread if spread > 0 else np.zeros_like(values)


def additive(weight: float, tokenizer: Tokenizer = terms, b: float = 0.0) -> Fusion:
    """``cos + weight * bm25 / max(bm25)``, ungated; ``additive(0.3, tokenize, 0.75)`` is the old default."""

    def fusion(s: LabScope, q: LabQuery, rows: np.ndarray, cos: np.ndarray) -> np.ndarray:
        return cos + lexical_bonus(pool_bm25(s, q, rows, tokenizer, b=b), weight)

    return fusion


def zscore(weight: float) -> Fusion:
    """Per-query normalisation: ``z(cos) + weight * z(bm25)`` over the pool."""
    return lambda s, q, rows, cos: _z(cos) + weight * _z(pool_bm25(s, q, rows))


def minmax(weight: float) -> Fusion:
    """Per-query normalisation: both signals scaled to [0, 1] over the pool."""
    return lambda s, q, rows, cos: _unit(cos) + weight * _unit(pool_bm25(s, q, rows))


def _cjk_script(text: str) -> bool:
    tokens = tokenize(text)
    return bool(tokens) and sum(bool(_CJK.match(t)) for t in tokens) * 2 >= len(tokens)


def gated(weight: float, mode: str) -> Fusion:
    """The lexical bonus weighs only within the query's language; ``mode`` says how.

    ``language``: the previous default's ``language_gate`` (other-language candidates credited the
    same-language bonus at their cosine rank; Simplified and Traditional Chinese apart; identifiers exempt).
    ``script``: the same credit, but with CJK against everything else only.
    ``query``: the whole query falls back to cosine order when its cosine top-1 is in another language.
    ``drop``: other-language candidates get no bonus at all.
    """

    def fusion(s: LabScope, q: LabQuery, rows: np.ndarray, cos: np.ndarray) -> np.ndarray:
        texts = [s.texts[i] for i in rows]
        bonus = lexical_bonus(pool_bm25(s, q, rows), weight)
        if mode == "language":
            return cos + language_gate(q.text, texts, cos, bonus)
        if mode == "script":
            mine = _cjk_script(q.text)
            other = np.array([_cjk_script(t) != mine for t in texts])
            if has_identifier(q.text) or not other.any() or other.all():
                return cos + bonus
            return cos + _credit(bonus, cos, other)
        mine = language(q.text)
        other = np.array([not same_language(language(t), mine) for t in texts])
        if mode == "query":
            return cos if other[int(np.argmax(cos))] else cos + bonus
        return cos + np.where(other, 0.0, bonus)

    return fusion


def language_gate(query: str, texts: list[str], cosines: np.ndarray, bonus: np.ndarray) -> np.ndarray:
    """The previous default's gate: a candidate in another language than the query is credited the bonus
    of the same-language candidate at its cosine rank, unless the query names an identifier (it lifted
    unrelated memories that share no word with the query, hence ``ranking.language_cap``)."""
    if has_identifier(query):
        return bonus
    mine = language(query)
    other = np.array([not same_language(language(text), mine) for text in texts], dtype=bool)
    if not other.any() or other.all():
        return bonus
    return _credit(bonus, cosines, other)


def _credit(bonus: np.ndarray, cos: np.ndarray, other: np.ndarray) -> np.ndarray:
    """``language_gate``'s credit for an ``other`` mask computed some other way."""
    same = np.sort(bonus[~other])[::-1]
    rank = np.empty(int(other.sum()), dtype=np.int64)
    rank[np.argsort(-cos[other], kind="stable")] = np.arange(rank.size)
    out = bonus.copy()
    out[other] = np.maximum(bonus[other], same[np.minimum(rank, same.size - 1)])
    return out


def with_recency(inner: Fusion, weight: float, half_life_days: float = 30.0) -> Fusion:
    """``inner + weight * 0.5^(age / half-life)``, the age counted from the scope's newest row."""

    def fusion(s: LabScope, q: LabQuery, rows: np.ndarray, cos: np.ndarray) -> np.ndarray:
        age = np.maximum(float(s.timestamps.max()) - s.timestamps[rows].astype(np.float64), 0.0) / MS_PER_DAY
        return inner(s, q, rows, cos) + weight * np.power(0.5, age / half_life_days)

    return fusion


def prf(model: str, fusion: Fusion, beta: float, depth: int) -> Method:
    """Pseudo-relevance feedback: the first pass's top ``depth`` rows pull the query vector
    (``q + beta * mean``, re-normalised); the second pass pools and fuses with the new cosines."""

    def method(s: LabScope, q: LabQuery) -> list[int]:
        cosines = s.docs[model] @ q.vectors[model]
        rows = pool(cosines, q)
        first = ordered(rows, fusion(s, q, rows, cosines[rows].astype(np.float64)))[:depth]
        moved = q.vectors[model] + beta * s.docs[model][first].mean(axis=0)
        cosines = s.docs[model] @ (moved / np.linalg.norm(moved))
        rows = pool(cosines, q)
        return ordered(rows, fusion(s, q, rows, cosines[rows].astype(np.float64)))

    return method


def ensemble(models: tuple[str, str], fusion: Fusion, share: float = 0.5) -> Method:
    """Two models' cosines, z-scored over the first model's pool and mixed ``share`` : ``1 - share``
    (on the first model's cosine scale, so ``fusion``'s weight means what it means there), then ``fusion``."""

    def method(s: LabScope, q: LabQuery) -> list[int]:
        first, second = (s.docs[m] @ q.vectors[m] for m in models)
        rows = pool(first, q)
        mixed = share * _z(first[rows].astype(np.float64)) + (1 - share) * _z(second[rows].astype(np.float64))
        return ordered(rows, fusion(s, q, rows, mixed * float(first[rows].std())))

    return method


def coverage(s: LabScope, q: LabQuery, rows: np.ndarray, tokenizer: Tokenizer = terms) -> np.ndarray:
    """The idf-weighted share of the query's terms each row contains (idf over the pool; a query term
    no candidate holds weighs the most, so a query that shares little with every memory stays low)."""
    counts = s.tokens(tokenizer.__name__, tokenizer)
    docs = [counts[i] for i in rows]
    wanted = set(tokenizer(q.text))
    out = np.zeros(len(docs), dtype=np.float64)
    total = 0.0
    for term in wanted:
        has = np.array([term in d for d in docs], dtype=bool)
        df = int(has.sum())
        idf = np.log(1.0 + (len(docs) - df + 0.5) / (df + 0.5))
        total += idf
        out += idf * has
    return out / total if total > 0 else out


def _convex(cos: np.ndarray, lexical: np.ndarray, weight: float) -> np.ndarray:
    return (np.clip(cos, 0.0, 1.0) + weight * lexical) / (1.0 + weight)


def covered(weight: float, floor: float, relative: bool = False, ramp: bool = False,
            tokenizer: Tokenizer = terms) -> Fusion:
    """``fuse(cos, keyword)`` with ``keyword`` the coverage where it reaches ``floor`` (else 0); ``relative``
    divides it by the pool's best coverage, ``ramp`` maps [floor, 1] onto [0, 1]."""

    def fusion(s: LabScope, q: LabQuery, rows: np.ndarray, cos: np.ndarray) -> np.ndarray:
        cov = coverage(s, q, rows, tokenizer)
        lexical = np.where(cov >= floor, cov, 0.0)
        if ramp and floor < 1:
            lexical = np.where(cov >= floor, (cov - floor) / (1 - floor), 0.0)
        if relative and lexical.max() > 0:
            lexical = lexical / lexical.max()
        return _convex(cos, lexical, weight)

    return fusion


def bm25_floor(weight: float, floor: float, tokenizer: Tokenizer = terms) -> Fusion:
    """The max-normalised BM25 of the old default, ungated, counted only where coverage reaches ``floor``."""

    def fusion(s: LabScope, q: LabQuery, rows: np.ndarray, cos: np.ndarray) -> np.ndarray:
        bm = lexical_bonus(pool_bm25(s, q, rows, tokenizer), 1.0)
        return _convex(cos, np.where(coverage(s, q, rows, tokenizer) >= floor, bm, 0.0), weight)

    return fusion


def rrf_bounded(k: float, floor: float, tokenizer: Tokenizer = terms) -> Fusion:
    """Reciprocal-rank fusion of the cosine rank and the coverage rank (rows under ``floor`` get no
    keyword vote), divided by its largest possible value so it stays in [0, 1]."""

    def fusion(s: LabScope, q: LabQuery, rows: np.ndarray, cos: np.ndarray) -> np.ndarray:
        cov = coverage(s, q, rows, tokenizer)
        vector_rank, lexical_rank = np.empty(len(rows)), np.empty(len(rows))
        vector_rank[np.argsort(-cos, kind="stable")] = np.arange(len(rows))
        lexical_rank[np.argsort(-cov, kind="stable")] = np.arange(len(rows))
        votes = 1.0 / (k + 1 + vector_rank) + np.where(cov >= max(floor, 1e-9), 1.0 / (k + 1 + lexical_rank), 0.0)
        return votes / (2.0 / (k + 1))

    return fusion


def query_floor(weight: float, floor: float, signal: str = "bm25", tokenizer: Tokenizer = terms) -> Fusion:
    """The keyword signal counts for a query only when some candidate holds at least ``floor`` of its
    terms (idf-weighted); else the query keeps its vector order. ``signal``: ``bm25`` (over its max),
    ``coverage`` (as it is) or ``relative`` (coverage over its max)."""

    def fusion(s: LabScope, q: LabQuery, rows: np.ndarray, cos: np.ndarray) -> np.ndarray:
        cov = coverage(s, q, rows, tokenizer)
        if cov.size == 0 or cov.max() < floor:
            return _convex(cos, np.zeros_like(cos), weight)
        if signal == "bm25":
            lexical = lexical_bonus(pool_bm25(s, q, rows, tokenizer), 1.0)
        else:
            lexical = cov / cov.max() if signal == "relative" else cov
        return _convex(cos, lexical, weight)

    return fusion


# English function words beyond the ranking's short list, and Chinese function bigrams (question words,
# "now", "every", "before"): the words a reworded query shares with an unrelated memory by accident.
_EXTRA_STOP_TEXT = (
    "about above after again against all also am any because before being below between both can could "
    "down during each every few further here just more most must may might no nor not now off once only "
    "other out over own same should some such than then there these those through too under until up very "
    "would yes yet else ever get got keep make made many much new one two use used way well still like "
    "什么 什麼 甚麼 怎么 怎麼 为什 為什 么样 麼樣 哪里 哪裡 哪个 哪個 现在 現在 一次 每个 每個 之前 之后 之後 "
    "以后 以後 时候 時候 可以 需要 应该 應該 如何 是否 有没 有沒 没有 沒有 的时 的時 了什 是什 要做 做什 "
    "多少 多久 一个 一個 这个 這個 那个 那個 我们 我們 大家 后来 後來 怎样 怎樣 会不 會不 不会 不會"
)
EXTRA_STOP = frozenset(_EXTRA_STOP_TEXT.split())


def terms_stopped(text: str) -> list[str]:
    """``ranking.terms`` without ``EXTRA_STOP``."""
    return [t for t in terms(text) if t not in EXTRA_STOP]


def capped(weight: float, row_floor: float = 0.0, query_floor_: float = 0.0, signal: str = "bm25",
           tokenizer: Tokenizer = terms) -> Fusion:
    """Ungated keyword score (a row sharing no term gets none), counted from ``row_floor`` coverage and
    when some row reaches ``query_floor_``, then ``ranking.language_cap``; ``capped(0.7, 0.15)`` replays the
    default on the pool as ``pooled`` orders it."""

    def fusion(s: LabScope, q: LabQuery, rows: np.ndarray, cos: np.ndarray) -> np.ndarray:
        cov = coverage(s, q, rows, tokenizer)
        if cov.size == 0 or cov.max() < max(query_floor_, 1e-12):
            return _convex(cos, np.zeros_like(cos), weight)
        lexical = lexical_bonus(pool_bm25(s, q, rows, tokenizer), 1.0) if signal == "bm25" else cov / cov.max()
        scores = _convex(cos, np.where(cov >= row_floor, lexical, 0.0), weight)
        return language_cap(q.text, [s.texts[i] for i in rows], cos, scores)

    return fusion

