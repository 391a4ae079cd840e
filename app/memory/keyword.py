"""Keyword search by substring, so Chinese and exact identifiers are found.

Why not LanceDB's full-text index: the default tokenizer keeps a CJK run as one token (and drops
runs over 40 bytes), so ``毫秒`` is never found inside ``必須用毫秒``; an n-gram index would work
but must be rebuilt after every write by *every* writer (OpenClaw does not maintain ours), and it
ranks ``TASK-00012`` by shared trigrams rather than exact match. One scan of the scope's id, text and
timestamp columns (from the vector cache's in-memory copy when it is current, else LanceDB's scan with
the scope pre-filtered), lower-cased and matched with Python's substring search, finds any substring
exactly, needs no index to keep in sync, and costs one columnar scan (see the README/bench for numbers).

Ranking: rows containing every query term come first (score 1.0, newest first); when there are
fewer than ``limit`` of those, rows containing some terms follow, scored by the share of the query's
characters they contain. For that second pass a CJK term longer than two characters also counts
its character bigrams, so a Chinese sentence still finds memories that share words with it.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from app.memory.ports import MemoryReader

MAX_TERMS = 16
MAX_TERM_CHARS = 200
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")


def query_terms(query: str) -> list[str]:
    """Whitespace-separated terms, lower-cased, de-duplicated, bounded in number and length."""
    seen: dict[str, None] = {}
    for raw in query.split():
        term = raw.lower()[:MAX_TERM_CHARS]
        if term:
            seen.setdefault(term, None)
    return list(seen)[:MAX_TERMS]


def _partial_terms(terms: list[str]) -> list[str]:
    expanded: dict[str, None] = dict.fromkeys(terms)
    for term in terms:
        if len(term) > 2 and _CJK.search(term):
            for i in range(len(term) - 1):
                expanded.setdefault(term[i : i + 2], None)
    return list(expanded)[: MAX_TERMS * 4]


def search(store: MemoryReader, query: str, scope_filter: str | None, limit: int) -> list[dict[str, Any]]:
    """Rows matching the query, best first, each with a ``score`` in [0, 1] (blocking)."""
    ranked = rank(store, query, scope_filter, limit)
    rows = {row["id"]: row for row in store.get_rows([memory_id for memory_id, _ in ranked])}
    return [{**rows[memory_id], "score": score} for memory_id, score in ranked if memory_id in rows]


def rank(store: MemoryReader, query: str, scope_filter: str | None, limit: int) -> list[tuple[str, float]]:
    """``(id, score)`` of the best ``limit`` matches, from one scan of the scope's id/text/timestamp.

    Why not ``ILIKE`` in the scan: measured at 10k rows, two ``ILIKE`` scans (every term, then any
    term) took ~40 ms; decoding the text column once and matching in memory takes ~10 ms.
    """
    terms = query_terms(query)
    if not terms:
        return []
    columns = [c for c in ("id", "text", "timestamp") if c in store.row_columns]
    table = store.scan_columns(scope_filter, columns)
    if table.num_rows == 0:
        return []
    texts = pc.utf8_lower(pc.fill_null(table.column("text"), "")).to_pylist()
    partial_terms = _partial_terms(terms)  # the terms first, then CJK bigrams: one match per term
    masks = {term: _contains(texts, term) for term in partial_terms}
    every = np.logical_and.reduce([masks[term] for term in terms])
    covered = np.zeros(table.num_rows, dtype=np.float64)
    for term, mask in masks.items():
        covered += len(term) * mask
    scores = np.where(every, 1.0, np.round(covered / sum(len(t) for t in partial_terms), 4))
    matched = np.flatnonzero(scores > 0)
    stamps = _timestamps(table)[matched]
    # Best score first, then newest; lexsort is stable, so full ties keep the scan order.
    order = matched[np.lexsort((-stamps, -scores[matched]))][:limit]
    ids = table.column("id").to_pylist()
    return [(str(ids[i]), float(scores[i])) for i in order]


def _contains(texts: list[str], term: str) -> np.ndarray:
    # Python's substring search beat Arrow's match_substring here (0.8 vs 1.5 ms per term at 10k rows).
    return np.fromiter((term in text for text in texts), dtype=bool, count=len(texts))


def _timestamps(table: pa.Table) -> np.ndarray:
    if "timestamp" not in table.column_names:
        return np.zeros(table.num_rows, dtype=np.float64)
    column = pc.fill_null(pc.cast(table.column("timestamp"), pa.float64()), 0.0)
    return np.asarray(column.to_numpy(), dtype=np.float64)

