"""Okapi BM25 over a whole scope (Lucene's non-negative idf), numpy only: the benchmarks' lexical reference.

By default it is the classic reference: ``app.memory.ranking.tokenize`` (words, CJK bigrams, a short
stop list) and length normalisation ``b = 0.75``. ``BM25(docs, tokenizer=terms, b=0.0)`` is the same
lexical signal the service's ranking uses (stemmed, no length normalisation), whose
``bm25_scores`` computes it over a candidate pool only.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence

import numpy as np

from app.memory.ranking import tokenize


class BM25:
    """Okapi BM25 over a fixed list of documents; ``scores(query)`` returns one float per document."""

    def __init__(self, documents: Sequence[str], k1: float = 1.2, b: float = 0.75,
                 tokenizer: Callable[[str], list[str]] = tokenize) -> None:
        self.tokenizer = tokenizer
        self.k1 = k1
        self.b = b
        self.n_docs = len(documents)
        lengths = np.zeros(self.n_docs, dtype=np.float32)
        postings: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for doc_id, text in enumerate(documents):
            counts = Counter(tokenizer(text))
            lengths[doc_id] = sum(counts.values())
            for term, tf in counts.items():
                postings[term].append((doc_id, tf))
        self.avg_len = float(lengths.mean()) if self.n_docs else 0.0
        self._norm = k1 * (1.0 - b + b * lengths / max(self.avg_len, 1e-9))
        self._postings = {
            term: (np.array([d for d, _ in pairs], dtype=np.int64), np.array([t for _, t in pairs], dtype=np.float32))
            for term, pairs in postings.items()
        }
        self._idf = {
            term: math.log(1.0 + (self.n_docs - len(pairs) + 0.5) / (len(pairs) + 0.5))
            for term, pairs in postings.items()
        }

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every document for ``query`` (0 where no query term occurs)."""
        out = np.zeros(self.n_docs, dtype=np.float32)
        for term in set(self.tokenizer(query)):
            posting = self._postings.get(term)
            if posting is None:
                continue
            doc_ids, tf = posting
            out[doc_ids] += self._idf[term] * tf * (self.k1 + 1.0) / (tf + self._norm[doc_ids])
        return out
