"""Keyword search by substring, so Chinese and exact identifiers are found.

Why not LanceDB's full-text index: the default tokenizer keeps a CJK run as one token (and drops
runs over 40 bytes), so ``毫秒`` is never found inside ``必須用毫秒``; an n-gram index would work
but must be rebuilt after every write by *every* writer (OpenClaw does not maintain ours), and it
ranks ``TASK-00012`` by shared trigrams rather than exact match. A case-insensitive ``ILIKE`` scan of
the text column (pre-filtered by scope inside LanceDB) finds any substring exactly, needs no index to
keep in sync, and costs one columnar scan (see the README/bench for numbers).

Ranking: rows containing every query term come first (score 1.0, newest first); when there are
fewer than ``limit`` of those, rows containing some terms follow, scored by the share of the query's
characters they contain. For that second pass a CJK term longer than two characters also counts
its character bigrams, so a Chinese sentence still finds memories that share words with it.
"""

from __future__ import annotations

import re
from typing import Any

from app.memory import filters
from app.memory.store import Store

MAX_TERMS = 16
MAX_TERM_CHARS = 200
CANDIDATE_CAP = 2000
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


def search(store: Store, query: str, scope_filter: str | None, limit: int) -> list[dict[str, Any]]:
    """Rows matching the query, best first, each with a ``score`` in [0, 1] (blocking)."""
    terms = query_terms(query)
    if not terms:
        return []
    columns = store.row_columns
    every = filters.all_of(*(filters.contains("text", t) for t in terms))
    full = store.scan(filters.all_of(scope_filter, every), columns, limit=CANDIDATE_CAP).to_pylist()
    full.sort(key=_newest_first)
    hits = [{**row, "score": 1.0} for row in full[:limit]]
    if len(hits) >= limit or len(terms) == 1 and not _partial_terms(terms)[1:]:
        return hits
    partial_terms = _partial_terms(terms)
    some = filters.any_of(*(filters.contains("text", t) for t in partial_terms))
    candidates = store.scan(filters.all_of(scope_filter, some), columns, limit=CANDIDATE_CAP).to_pylist()
    found = {row["id"] for row in hits}
    total = sum(len(t) for t in partial_terms)
    scored = []
    for row in candidates:
        if row["id"] in found:
            continue
        text = (row.get("text") or "").lower()
        covered = sum(len(t) for t in partial_terms if t in text)
        scored.append({**row, "score": round(covered / total, 4)})
    scored.sort(key=lambda r: (-r["score"], *_newest_first(r)))
    return hits + scored[: limit - len(hits)]


def _newest_first(row: dict[str, Any]) -> tuple[float]:
    return (-float(row.get("timestamp") or 0),)
