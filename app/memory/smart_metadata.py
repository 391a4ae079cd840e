"""memory-lancedb-pro's smart metadata: the fields every row we write carries, and those reads take from it.

The plugin counts a row as current only when its metadata JSON names a ``memory_category``
(``MemoryUpgrader.isLegacyMemory``); OpenClaw asks the user to run ``upgrade`` for any other, which
overwrites our ``source``. Its retriever, decay and tiering read the rest (``src/smart-metadata.ts``).
So a row gets the values the plugin's own ``memory_store`` tool gives a memory stored by hand:

- ``memory_category``: the plugin's smart category for the tags (``categories.memory_category``);
- ``l0_abstract`` / ``l1_overview`` / ``l2_content``: the first sentence (at most 100 characters), the
  same as a bullet, the whole text: what the plugin's upgrader writes without an LLM;
- ``tier`` working, ``confidence`` 0.7, ``state`` confirmed, ``memory_layer`` durable, ``source`` manual;
- ``access_count`` 0, ``last_accessed_at`` and ``valid_from`` the creation time in ms, its counters 0.

``source`` must be one of the plugin's sources (it reads any other as ``legacy``), so our provenance
is ``origin: memory-mcp``; earlier versions wrote ``source: memory-mcp``, which ``stamp`` moves there.
Access counts are the plugin's: its retriever counts its own recalls; ours only read (a commit per
search would cost more than the search), and our updates keep what it counted.

A row the plugin (or our supersede) invalidated is retired from ``invalidated_at`` on, as its
``isMemoryActiveAt`` says: recall hides it like a superseded memory (``supersede``).
"""

from __future__ import annotations

import math
import re
from typing import Any

from app.memory import categories

ORIGIN_KEY = "origin"
ORIGIN = "memory-mcp"
#: memory-lancedb-pro's MemorySource values; any other ``source`` reads as "legacy" there.
PLUGIN_SOURCES = frozenset({"manual", "auto-capture", "reflection", "dreaming-engine", "session-summary", "legacy"})
#: Metadata ``type`` values of the plugin's reflection rows, which its upgrader never counts as legacy.
REFLECTION_TYPES = frozenset({"memory-reflection", "memory-reflection-event", "memory-reflection-item",
                              "memory-reflection-mapped"})
DEFAULT_CONFIDENCE = 0.7
ABSTRACT_CHARS = 100
# The upgrader's simpleEnrich: the first sentence, ended by Western or CJK punctuation or a line break.
_FIRST_SENTENCE = re.compile(r"[^.!?。！？\n]+[.!?。！？]?")


def abstract(text: str) -> str:
    """The plugin's L0 of a text without an LLM: its first sentence, at most 100 characters."""
    match = _FIRST_SENTENCE.match(text)
    first = (match.group(0) if match else text)[:ABSTRACT_CHARS].strip()
    return first or text.strip()[:ABSTRACT_CHARS]


def texts(text: str) -> dict[str, str]:
    """The three levels of the plugin's smart memory for ``text``."""
    summary = abstract(text)
    return {"l0_abstract": summary, "l1_overview": f"- {summary}", "l2_content": text}


def for_new_row(text: str, memory_category: str, timestamp: int) -> dict[str, Any]:
    """The smart fields of a row memory-mcp creates at ``timestamp`` (ms)."""
    return {
        **texts(text),
        "memory_category": memory_category,
        "tier": "working",
        "confidence": DEFAULT_CONFIDENCE,
        "access_count": 0,
        "last_accessed_at": timestamp,
        "valid_from": timestamp,
        "state": "confirmed",
        "source": "manual",
        "memory_layer": "durable",
        "injected_count": 0,
        "bad_recall_count": 0,
        "suppressed_until_turn": 0,
    }


def is_ours(metadata: dict[str, Any]) -> bool:
    return metadata.get(ORIGIN_KEY) == ORIGIN or metadata.get("source") == ORIGIN


def is_legacy(category: object, metadata: dict[str, Any] | None) -> bool:
    """The plugin upgrader's ``isLegacyMemory``: no ``memory_category``, unless a reflection row."""
    if category == "reflection" or (metadata is not None and metadata.get("type") in REFLECTION_TYPES):
        return False
    return not (metadata or {}).get("memory_category")


def stamp(metadata: dict[str, Any], *, text: str, tags: list[str], column: object, timestamp: int) -> dict[str, Any]:
    """An earlier version's row brought to the current format: the smart fields it lacks, ``source``
    as the plugin reads it, our provenance in ``origin``. Values the row has are kept."""
    stamped = {**for_new_row(text, categories.memory_category(tags, column), timestamp or 0), **metadata}
    if stamped.get("source") not in PLUGIN_SOURCES:
        stamped["source"] = "manual"
    stamped[ORIGIN_KEY] = ORIGIN
    if not timestamp:  # the plugin falls back to the row's timestamp; with none, leave its fallback to it
        for key in ("last_accessed_at", "valid_from"):
            if not stamped.get(key):
                stamped.pop(key, None)
    return stamped


def revised(metadata: dict[str, Any], *, text: str, tags: list[str], column: object, timestamp: int,
            text_changed: bool, tags_changed: bool) -> dict[str, Any]:
    """The metadata of an updated row: an earlier version's row of ours stamped (``stamp``: the lazy
    upgrade), the texts and the category of a current one brought in line with what changed. A row
    the plugin wrote in its legacy format stays as it is for the plugin's own upgrader."""
    if is_ours(metadata) and is_legacy(column, metadata):
        return stamp(metadata, text=text, tags=tags, column=column, timestamp=timestamp)
    if is_legacy(column, metadata):
        return metadata
    updated = dict(metadata)
    if text_changed:
        updated.update(texts(text))
    if tags_changed:
        updated["memory_category"] = categories.memory_category(tags, column)
    return updated


# --- supersede, in the plugin's terms -------------------------------------------------------------


def _timestamp(value: object) -> int | None:
    """The plugin's normalizeOptionalTimestamp: a positive finite number (or numeric string), floored."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, int | float) and math.isfinite(value) and value > 0:
        return int(value)
    return None


def valid_from(metadata: dict[str, Any], timestamp: object) -> int:
    return _timestamp(metadata.get("valid_from")) or _timestamp(timestamp) or 0


def retired_at(metadata: dict[str, Any], timestamp: object, now: int) -> int | None:
    """When the row stopped being current (ms), if it has by ``now``: its ``invalidated_at``, counted
    as the plugin's isMemoryActiveAt counts it (ignored when before ``valid_from``)."""
    invalidated = _timestamp(metadata.get("invalidated_at"))
    if invalidated is None or invalidated < valid_from(metadata, timestamp) or invalidated > now:
        return None
    return invalidated


def _relations(metadata: dict[str, Any]) -> list[dict[str, Any]]:
    listed = metadata.get("relations")
    if not isinstance(listed, list):
        return []
    return [r for r in listed if isinstance(r, dict) and isinstance(r.get("type"), str)
            and isinstance(r.get("targetId"), str)]


def with_relation(metadata: dict[str, Any], kind: str, target: str) -> list[dict[str, Any]]:
    """The plugin's appendRelation: ``relations`` with ``{type, targetId}`` added once."""
    relations = _relations(metadata)
    if not any(r["type"] == kind and r["targetId"] == target for r in relations):
        relations.append({"type": kind, "targetId": target})
    return relations


def invalidated(metadata: dict[str, Any], new_id: str, timestamp: object, now: int) -> dict[str, Any]:
    """The replaced row's metadata, as the plugin's supersede leaves it: ``superseded_by``, ``invalidated_at``
    (never before ``valid_from``, where the plugin would ignore it) and the relation."""
    return {**metadata, "superseded_by": new_id, "invalidated_at": max(now, valid_from(metadata, timestamp)),
            "relations": with_relation(metadata, "superseded_by", new_id)}


def reinstated(metadata: dict[str, Any], forgotten_id: str) -> dict[str, Any] | None:
    """The metadata of a row whose replacement ``forgotten_id`` is being forgotten: current again on
    both sides. None when the row does not name that replacement (nothing to undo)."""
    if metadata.get("superseded_by") != forgotten_id:
        return None
    restored = {k: v for k, v in metadata.items() if k not in ("superseded_by", "invalidated_at")}
    if "relations" in metadata:
        restored["relations"] = [r for r in _relations(metadata)
                                 if (r["type"], r["targetId"]) != ("superseded_by", forgotten_id)]
    return restored
