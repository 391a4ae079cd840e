"""Memories that name what replaced them: writing the link, and how reads see it.

``remember(..., supersedes=X)`` links the new memory Y to the older X it replaces. The table's columns
are shared with memory-lancedb-pro, so the link lives in the metadata JSON of both rows, in the plugin's
own terms (its ``storeSuperseding``): ``supersedes: X`` on Y and, on X, ``superseded_by: Y``,
``invalidated_at`` (ms) and a ``superseded_by`` relation. Nothing is deleted; recall hides X unless asked
for it, here and in the plugin (whose retriever skips a row from its ``invalidated_at`` on).

Order of the two commits: Y is committed first, carrying its half of the link, then X's metadata is
updated; the call is acknowledged only after both. A crash (or a failed second commit) in between leaves
Y stored, unacknowledged, naming X while X does not name Y. Reads therefore take the link from either side:

- X is superseded when its ``superseded_by`` names a row that still exists, or when a memory in the same
  result list or page names X in ``supersedes`` (the one-sided link; X found without Y shows as current).
- A ``superseded_by`` naming a deleted memory is no link: forgetting the replacement brings X back, and
  ``reinstate`` clears X's ``invalidated_at`` first, so it is back for the plugin too.
- A row the plugin retired (``invalidated_at`` reached, ``smart_metadata.retired_at``) is hidden like a
  superseded one, whether or not it names its replacement; the plugin supersedes with both fields.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from app.memory import smart_metadata
from app.memory.errors import AlreadySuperseded
from app.memory.models import Memory
from app.memory.ports import MemoryReader
from app.memory.rows import SUPERSEDED_BY, link, now_ms, tags_of
from app.memory.store.schema import parse_metadata

logger = logging.getLogger(__name__)

M = TypeVar("M", bound=Memory)
Update = Callable[[str, dict[str, Any]], Awaitable[int]]


async def resolve(store: MemoryReader, memories: list[M]) -> list[M]:
    """Set each memory's ``superseded_by`` as reads see it (module docstring); returns ``memories``."""
    named = sorted({m.superseded_by for m in memories if m.superseded_by})
    alive: set[str] = set()
    if named:  # the common list holds no link: no extra read
        alive = {str(row["id"]) for row in await asyncio.to_thread(store.get_rows, named, ["id"])}
    claims = {m.supersedes: m.id for m in memories if m.supersedes}
    for memory in memories:
        if memory.superseded_by not in alive:
            memory.superseded_by = claims.get(memory.id)
    return memories


async def current(store: MemoryReader, include_superseded: bool, hits: list[M]) -> list[M]:
    """A result list's hits with their links resolved, the superseded ones dropped unless asked for."""
    resolved = await resolve(store, hits)
    if include_superseded:
        return resolved
    return [hit for hit in resolved if hit.superseded_by is None and hit.invalidated_at is None]


def check_replaceable(memory: Memory) -> Memory:
    """Raises: AlreadySuperseded: a newer memory replaced it already (replacing it again would fork the chain)."""
    if memory.superseded_by is not None:
        raise AlreadySuperseded(f"memory {memory.id!r} is already superseded by {memory.superseded_by!r}; "
                                f"pass supersedes={memory.superseded_by!r} instead")
    return memory


async def mark_replaced(store: MemoryReader, update: Update, old_id: str, new_id: str) -> None:
    """Mark the old row replaced, as the plugin does (the second commit; ``update``: ``Writer.update``);
    an earlier version's row gets the plugin's smart metadata on the way (``smart_metadata.stamp``).

    The row is read again just before the write, so a change made while the new memory was embedded
    and committed is kept.
    """
    rows = await asyncio.to_thread(store.get_rows, [old_id], ["text", "category", "timestamp", "metadata"])
    if rows:
        row = rows[0]
        metadata = parse_metadata(row.get("metadata"))
        if smart_metadata.is_ours(metadata) and smart_metadata.is_legacy(row.get("category"), metadata):
            metadata = smart_metadata.stamp(metadata, text=row.get("text") or "", tags=tags_of(row, metadata),
                                            column=row.get("category"), timestamp=int(row.get("timestamp") or 0))
        metadata = smart_metadata.invalidated(metadata, new_id, row.get("timestamp"), now_ms())
        if await update(old_id, {"metadata": json.dumps(metadata, ensure_ascii=False)}):
            return
    # Deleted meanwhile: the new memory stands alone, as if the old one had been forgotten after the link.
    logger.info("memory %s was deleted before it could be marked superseded by %s", old_id, new_id)


async def reinstate(store: MemoryReader, update: Update, forgotten: Memory) -> None:
    """Before ``forgotten`` is deleted: the memory it replaced is current again, for the plugin too (its
    ``superseded_by`` and ``invalidated_at`` go). Nothing when it replaced none, or another one since."""
    if forgotten.supersedes is None:
        return
    rows = await asyncio.to_thread(store.get_rows, [forgotten.supersedes], ["metadata"])
    if not rows:
        return
    restored = smart_metadata.reinstated(parse_metadata(rows[0].get("metadata")), forgotten.id)
    if restored is not None:
        await update(forgotten.supersedes, {"metadata": json.dumps(restored, ensure_ascii=False)})


def hint(row: dict[str, Any], text: str, replaces: str | None = None) -> str | None:
    """How to supersede a near-duplicate row that says something else; None for a plain repeat (same text),
    for the memory being replaced already, and for a memory that something else replaced."""
    memory_id = str(row["id"])
    if memory_id == replaces or (row.get("text") or "") == text:
        return None
    metadata = parse_metadata(row.get("metadata"))
    if link(metadata, SUPERSEDED_BY) or smart_metadata.retired_at(metadata, row.get("timestamp"), now_ms()):
        return None
    return f"if this replaces {memory_id}, remember with supersedes={memory_id}"


def first_hint(rows: Sequence[dict[str, Any]], text: str) -> str | None:
    """The hint for the most similar row that has one (rows best first)."""
    return next((found for row in rows if (found := hint(row, text)) is not None), None)
