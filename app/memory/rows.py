"""Conversion between table rows (memory-lancedb-pro layout) and the service's models."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

import numpy as np

from app.memory import categories, smart_metadata
from app.memory.models import Memory, MemoryHit
from app.memory.scopes import agent_of
from app.memory.store.schema import new_id, parse_metadata


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


#: Metadata keys of a supersede link (``supersede.py``); metadata, because the columns are memory-lancedb-pro's.
SUPERSEDES = "supersedes"
SUPERSEDED_BY = "superseded_by"


def new_row(text: str, vector: np.ndarray, scope: str, tags: list[str], importance: float,
            agent: str | None, embedding_model: str, supersedes: str | None = None) -> dict[str, Any]:
    """A fresh row with a UUID, a millisecond timestamp, the plugin's category for ``tags``, its smart
    metadata (``smart_metadata``) and our own fields (the tags, the agent, the model) in the metadata."""
    timestamp = now_ms()
    column = categories.from_tags(tags)
    metadata = {"created": iso(timestamp), "tags": tags, "agent": agent, "embedding_model": embedding_model,
                smart_metadata.ORIGIN_KEY: smart_metadata.ORIGIN,
                **smart_metadata.for_new_row(text, categories.memory_category(tags, column), timestamp)}
    if supersedes is not None:
        metadata[SUPERSEDES] = supersedes
        metadata["relations"] = [{"type": "supersedes", "targetId": supersedes}]
    return {
        "id": new_id(),
        "text": text,
        "vector": vector,
        "scope": scope,
        "category": column,
        "importance": importance,
        "timestamp": timestamp,
        "metadata": json.dumps(metadata, ensure_ascii=False),
    }


def revised_metadata(memory: Memory, metadata: dict[str, Any], values: dict[str, Any]) -> str:
    """The metadata JSON of ``memory`` updated with column ``values``: ``metadata`` (its own, changed) with
    ``updated`` set and the plugin's smart fields in line with the new text and tags (``smart_metadata.revised``)."""
    revised = smart_metadata.revised(
        {**metadata, "updated": iso(now_ms())}, text=values.get("text", memory.text),
        tags=[str(t) for t in metadata["tags"]] if isinstance(metadata.get("tags"), list) else memory.tags,
        column=values.get("category", memory.category), timestamp=memory.timestamp,
        text_changed="text" in values, tags_changed="category" in values)
    return json.dumps(revised, ensure_ascii=False)


def tags_of(row: dict[str, Any], metadata: dict[str, Any]) -> list[str]:
    """The metadata's tags; for an earlier version's row without them, the tags it kept in the column."""
    listed = metadata.get("tags")
    if isinstance(listed, list):
        return [str(t) for t in listed]
    return categories.legacy_tags(row.get("category"))


def link(metadata: dict[str, Any], key: str) -> str | None:
    """A supersede link from metadata; anything but a non-empty string (a foreign writer's value) is no link."""
    value = metadata.get(key)
    return value if isinstance(value, str) and value else None


def _fields(row: dict[str, Any]) -> dict[str, Any]:
    """A model's fields from a row; tolerant of legacy rows (float timestamps, nulls, foreign metadata)."""
    metadata = parse_metadata(row.get("metadata"))
    scope = row.get("scope") or "global"
    agent = metadata.get("agent")
    importance = row.get("importance")
    return {
        "id": str(row["id"]),
        "text": row.get("text") or "",
        "scope": scope,
        "category": categories.of_column(row.get("category")),
        "tags": tags_of(row, metadata),
        "importance": float(importance) if importance is not None else 0.7,
        "timestamp": int(row.get("timestamp") or 0),
        "agent": str(agent) if isinstance(agent, str) and agent else agent_of(scope),
        "metadata": metadata,
        "supersedes": link(metadata, SUPERSEDES),
        "superseded_by": link(metadata, SUPERSEDED_BY),
        "invalidated_at": smart_metadata.retired_at(metadata, row.get("timestamp"), now_ms()),
    }


def to_memory(row: dict[str, Any]) -> Memory:
    return Memory(**_fields(row))


def to_hit(row: dict[str, Any]) -> MemoryHit:
    """A search row: ``score`` orders the list, ``similarity`` (if the search compared vectors) is the cosine."""
    similarity = row.get("similarity")
    return MemoryHit(**_fields(row), score=float(row["score"]),
                     similarity=None if similarity is None else float(similarity))
