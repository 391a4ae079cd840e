"""Reads for browsing the whole store: pages that stay stable while agents write, and id and scope lookups.

``page_after`` pages newest first by ``(timestamp, id)`` after a key, not by offset, so a memory written
between two pages neither shifts the next page nor shows twice; each page costs one pass over the ids
and timestamps (the vector cache's copy when it is current) and a top-k, not a sort of the table.
"""

from __future__ import annotations

import asyncio

import pyarrow as pa
import pyarrow.compute as pc

from app.memory import supersede
from app.memory.models import Memory
from app.memory.ports import MemoryReader
from app.memory.rows import to_memory
from app.memory.scopes import GLOBAL

MAX_PAGE = 200
MAX_LOOKUP = 100

#: Where a page ends: the last memory's ``(timestamp, id)``; the next page starts after it.
PageKey = tuple[int, str]


def _newest_first(keys: pa.Table, limit: int) -> pa.Table:
    keys = keys.set_column(keys.schema.get_field_index("timestamp"), "timestamp",
                           pc.fill_null(keys.column("timestamp").cast(pa.int64()), 0))
    order = pc.select_k_unstable(keys, k=min(limit, keys.num_rows),
                                 sort_keys=[("timestamp", "descending"), ("id", "ascending")])
    return keys.take(order)


def _after(keys: pa.Table, key: PageKey) -> pa.Table:
    timestamp, memory_id = key
    stamps = pc.fill_null(keys.column("timestamp").cast(pa.int64()), 0)
    later = pc.or_(pc.less(stamps, timestamp),
                   pc.and_(pc.equal(stamps, timestamp), pc.greater(keys.column("id"), memory_id)))
    return keys.filter(later)


async def page_after(store: MemoryReader, key: PageKey | None, limit: int) -> tuple[list[Memory], PageKey | None]:
    """Up to ``limit`` memories newest first, after ``key``; the key of the next page, None on the last."""
    limit = max(1, min(limit, MAX_PAGE))

    def read() -> tuple[list[str], PageKey | None]:
        keys = store.scan_columns(None, ["id", "timestamp"])
        if key is not None:
            keys = _after(keys, key)
        chosen = _newest_first(keys, limit + 1).to_pylist()
        more = len(chosen) > limit
        chosen = chosen[:limit]
        last = (int(chosen[-1]["timestamp"] or 0), str(chosen[-1]["id"])) if more and chosen else None
        return [str(row["id"]) for row in chosen], last

    ids, next_key = await asyncio.to_thread(read)
    rows = {row["id"]: row for row in await asyncio.to_thread(store.get_rows, ids)}
    memories = [to_memory(rows[memory_id]) for memory_id in ids if memory_id in rows]
    return await supersede.resolve(store, memories), next_key


async def ids_starting(store: MemoryReader, prefix: str, limit: int = MAX_LOOKUP) -> tuple[list[str], int]:
    """The newest ids that start with ``prefix`` (any case) and how many ids do."""
    wanted = prefix.strip().lower()

    def read() -> tuple[list[str], int]:
        keys = store.scan_columns(None, ["id", "timestamp"])
        if wanted:
            keys = keys.filter(pc.starts_with(pc.utf8_lower(keys.column("id")), wanted))
        return [str(i) for i in _newest_first(keys, limit).column("id").to_pylist()], keys.num_rows

    return await asyncio.to_thread(read)


async def scopes(store: MemoryReader) -> list[str]:
    """Every scope that holds a memory, and ``global``, sorted."""

    def read() -> list[str]:
        column = store.scan_columns(None, ["scope"]).column("scope")
        return sorted({str(s) for s in pc.unique(column).to_pylist() if s} | {GLOBAL})

    return await asyncio.to_thread(read)


async def count(store: MemoryReader) -> int:
    """How many memories the table holds now."""
    return await asyncio.to_thread(lambda: store.scan_columns(None, ["id"]).num_rows)
