"""The ranking variants the quality bench measures, replayed by ``bench/ranking_lab.py`` on stored vectors.

Each ``Fusion`` orders one query's candidate pool (the service's: vector top-50, then keyword-only
rows). ``app.memory.ranking`` holds only what won; the others stay here so their numbers can be re-run.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from app.memory.ranking import has_identifier, language, language_gate, lexical_bonus, same_language, terms, tokenize
from bench.ranking_lab import Fusion, LabQuery, LabScope, Method, ordered, pool, pool_bm25

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

    ``language``: the service's ``ranking.language_gate`` (other-language candidates credited the
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
