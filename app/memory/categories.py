"""memory-lancedb-pro's storage categories, and how our tags map onto them.

The plugin's ``category`` column holds one of six storage categories; its stats and category filter
know no others. Our tags live in the row's metadata (``tags``), and the column gets the category the
first tag names (in the plugin's own vocabulary, its smart categories included), else ``other``, the
plugin's default. Rows written by earlier memory-mcp versions hold the tags joined by commas in the
column; they read as ``other`` with those tags (an update of their tags writes the category).
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


def named_by(word: str) -> str | None:
    """The storage category a word names (case-insensitive), or None."""
    lower = word.strip().lower()
    return lower if lower in STORAGE_CATEGORIES else _ALIASES.get(lower)


def from_tags(tags: Iterable[str]) -> str:
    """The column value for a memory with these tags: the first that names a category, else ``other``."""
    return next((category for tag in tags if (category := named_by(tag)) is not None), DEFAULT)


def of_column(raw: object) -> str:
    """A row's storage category; anything else in the column (another writer's value, an earlier
    version's tag list, null) counts as ``other``, as it does in ``filters.category``."""
    return raw if isinstance(raw, str) and raw in STORAGE_CATEGORIES else DEFAULT


def legacy_tags(raw: object) -> list[str]:
    """The tags an earlier memory-mcp kept in the column (joined by commas), for rows without metadata tags."""
    if not isinstance(raw, str) or raw in STORAGE_CATEGORIES:
        return []
    return [part.strip() for part in raw.split(",") if part.strip()]
