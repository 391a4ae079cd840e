"""memory-lancedb-pro's storage categories, and how our tags map onto them.

The plugin's ``category`` column holds one of six storage categories; its stats and category filter
know no others. Our tags live in the row's metadata (``tags``), and the column gets the category the
first tag names (in the plugin's own vocabulary, its smart categories included), else ``other``, the
plugin's default. Rows written by earlier memory-mcp versions hold the tags joined by commas in the
column; they read as ``other`` with those tags (an update of their tags writes the category).

The plugin's smart metadata also names one of its six smart categories (``memory_category``, its
``memory-categories.ts``); ``memory_category`` picks it from the same first tag, so the pair is one the
plugin maps onto each other (profile and cases onto fact, events onto decision, patterns onto other).
"""

from __future__ import annotations

from collections.abc import Iterable

STORAGE_CATEGORIES = ("preference", "fact", "decision", "entity", "reflection", "other")
DEFAULT = "other"
# The plugin's smart categories onto its storage ones (its memory-categories.ts), plus plurals.
_ALIASES = {
    "preferences": "preference", "profile": "fact", "entities": "entity", "events": "decision",
    "event": "decision", "cases": "fact", "case": "fact", "patterns": "other", "pattern": "other",
    "facts": "fact", "decisions": "decision", "reflections": "reflection",
}


SMART_CATEGORIES = ("profile", "preferences", "entities", "events", "cases", "patterns")
SMART_DEFAULT = "patterns"
# The plugin's normalizeCategory aliases (singulars), and its LEGACY_TO_SMART_CATEGORY for the storage ones.
_SMART_ALIASES = {"preference": "preferences", "entity": "entities", "event": "events", "case": "cases",
                  "pattern": "patterns"}
_STORAGE_TO_SMART = {"preference": "preferences", "fact": "cases", "decision": "events", "entity": "entities",
                     "reflection": "patterns", "other": "patterns"}


def named_by(word: str) -> str | None:
    """The storage category a word names (case-insensitive), or None."""
    lower = word.strip().lower()
    return lower if lower in STORAGE_CATEGORIES else _ALIASES.get(lower)


def from_tags(tags: Iterable[str]) -> str:
    """The column value for a memory with these tags: the first that names a category, else ``other``."""
    return next((category for tag in tags if (category := named_by(tag)) is not None), DEFAULT)


def smart_named_by(word: str) -> str | None:
    """The smart category a word names (case-insensitive): itself, its singular, or a storage category's."""
    lower = word.strip().lower()
    if lower in SMART_CATEGORIES:
        return lower
    if lower in _SMART_ALIASES:
        return _SMART_ALIASES[lower]
    storage = named_by(lower)
    return None if storage is None else _STORAGE_TO_SMART[storage]


def memory_category(tags: Iterable[str], column: object = None) -> str:
    """The plugin's ``memory_category`` for a row: from the first tag that names a category (the tag
    ``from_tags`` takes for the column), else from the column's storage category, as the plugin maps it."""
    for tag in tags:
        if (smart := smart_named_by(tag)) is not None:
            return smart
    return _STORAGE_TO_SMART[of_column(column)]


def of_column(raw: object) -> str:
    """A row's storage category; anything else in the column (another writer's value, an earlier
    version's tag list, null) counts as ``other``, as it does in ``filters.category``."""
    return raw if isinstance(raw, str) and raw in STORAGE_CATEGORIES else DEFAULT


def legacy_tags(raw: object) -> list[str]:
    """The tags an earlier memory-mcp kept in the column (joined by commas), for rows without metadata tags."""
    if not isinstance(raw, str) or raw in STORAGE_CATEGORIES:
        return []
    return [part.strip() for part in raw.split(",") if part.strip()]
