"""Input bounds for the memory service: refuse bad input with a clear error, never truncate."""

from __future__ import annotations

import math
import re

from app.errors import InvalidInput
from app.memory.errors import InvalidId, InvalidTags, InvalidText
from app.settings import Settings

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# Short ids, full UUIDs and memory-lancedb-pro's ``manual-<ms>-<n>`` ids all fit.
MEMORY_ID = re.compile(r"^[A-Za-z0-9_.:\-]{1,64}$")
#: Deepest page offset: far past any real table, and well inside the int64 the store's scan takes.
MAX_OFFSET = 1_000_000_000


def _encodable(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates from JSON "\ud800"
        return False
    return True


def check_text(text: str, settings: Settings, what: str = "text") -> str:
    """The text as given (not stripped: stored byte-exact), after checking its bounds.

    Raises:
        InvalidText: empty, too long, control characters or lone surrogates.
    """
    if not isinstance(text, str) or not text.strip():
        raise InvalidText(f"{what} must not be empty")
    if len(text) > settings.max_text_chars:
        raise InvalidText(
            f"{what} has {len(text)} characters; the limit is {settings.max_text_chars} "
            "(MEMORY_MCP_MAX_TEXT_CHARS); split it into several memories",
            code="text_too_long",
        )
    if _CONTROL.search(text):
        raise InvalidText(f"{what} contains a NUL or control character (only tab, newline and CR are allowed)")
    if not _encodable(text):
        raise InvalidText(f"{what} contains an unpaired surrogate (invalid Unicode)")
    return text


def check_query(query: str, settings: Settings) -> str:
    return check_text(query, settings, "query")


def check_tags(tags: list[str] | None, settings: Settings) -> list[str]:
    """Stripped, de-duplicated tags in their original order.

    Raises:
        InvalidTags: too many, too long, empty, or holding a comma or control character.
    """
    result: list[str] = []
    for raw in tags or []:
        if not isinstance(raw, str):
            raise InvalidTags("tags must be strings")
        tag = raw.strip()
        if not tag:
            raise InvalidTags("tags must not be empty")
        if "," in tag:
            raise InvalidTags(f"tag {tag!r} contains a comma; tags are stored joined by commas")
        if len(tag) > settings.max_tag_chars:
            raise InvalidTags(f"tag {tag[:20]!r}... is longer than {settings.max_tag_chars} characters")
        if _CONTROL.search(tag) or not _encodable(tag):
            raise InvalidTags("tags may not contain control characters or invalid Unicode")
        if tag not in result:
            result.append(tag)
    if len(result) > settings.max_tags:
        raise InvalidTags(f"{len(result)} tags given; the limit is {settings.max_tags}")
    return result


def split_category(category: str | None) -> list[str] | None:
    """Tags from a ``category`` string (tags joined by commas), or None when absent."""
    if category is None:
        return None
    return [part.strip() for part in category.split(",") if part.strip()]


def check_importance(importance: float) -> float:
    """Raises: InvalidInput: not a finite number in [0, 1]."""
    if isinstance(importance, bool) or not isinstance(importance, int | float) or not math.isfinite(importance):
        raise InvalidInput("importance must be a number between 0 and 1", code="invalid_importance")
    if not 0.0 <= importance <= 1.0:
        raise InvalidInput(f"importance {importance} is outside 0..1", code="invalid_importance")
    return float(importance)


def check_limit(value: int, name: str, maximum: int = 100, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise InvalidInput(f"{name} must be an integer in {minimum}..{maximum}", code="invalid_limit")
    return value


def check_offset(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_OFFSET:
        raise InvalidInput(f"offset must be an integer in 0..{MAX_OFFSET}", code="invalid_limit")
    return value


def check_memory_id(memory_id: str) -> str:
    """Raises: InvalidId: not a memory id (letters, digits, ``_.:-``; 1..64 characters)."""
    if not isinstance(memory_id, str) or not MEMORY_ID.fullmatch(memory_id):
        raise InvalidId("invalid memory id: expected 1..64 letters, digits or _ . : -")
    return memory_id
