"""Result lists of searches: one entry per text and scope, filled up to the number asked for.

The same text remembered twice (a hook storing the same summary, two agents noting the same fact)
would otherwise fill a short list with copies. A hit stands for its copies in the list and names them
in ``duplicate_ids``; nothing is deleted, so ``forget`` can still remove each copy by its id.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from app.memory.models import MemoryHit
from app.memory.rows import to_hit

#: Rows a search may read to fill a list with distinct texts; beyond it, a list of copies stays short.
MAX_ROWS = 1000

Fetch = Callable[[int], Awaitable[list[dict[str, Any]]]]
#: Turns a fetched batch of hits into the ones the list may show (e.g. ``supersede.current``).
Refine = Callable[[list[MemoryHit]], Awaitable[list[MemoryHit]]]


def collapse(hits: list[MemoryHit]) -> list[MemoryHit]:
    """The hits in their order, each identical text of a scope kept once: the first (best) copy,
    with the ids of the later copies in its ``duplicate_ids``."""
    first: dict[tuple[str, str], MemoryHit] = {}
    kept: list[MemoryHit] = []
    for hit in hits:
        key = (hit.scope, hit.text)
        if key in first:
            first[key].duplicate_ids.append(hit.id)
        else:
            first[key] = hit
            kept.append(hit)
    return kept


async def best_distinct(fetch: Fetch, top_k: int, refine: Refine | None = None) -> list[MemoryHit]:
    """The first ``top_k`` distinct hits of ``fetch(limit)`` (rows best first, ``score`` and optional
    ``similarity`` set) that ``refine`` keeps, asking for more rows only while copies or hits it dropped
    leave the list short."""
    limit = top_k
    while True:
        rows = await fetch(limit)
        hits = [to_hit(row) for row in rows]
        hits = collapse(await refine(hits) if refine is not None else hits)
        if len(hits) >= top_k or len(rows) < limit or limit >= MAX_ROWS:
            return hits[:top_k]
        limit = min(limit * 4, MAX_ROWS)
