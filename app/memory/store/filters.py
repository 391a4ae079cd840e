"""The one place that turns user values into LanceDB (DataFusion SQL) filter strings.

Nothing else in the package builds a ``where``/``delete`` string. User values only ever appear as
SQL string literals made by ``literal``: single quotes are doubled (the SQL rule; DataFusion does
not treat backslash as an escape inside literals) and NUL/C0 control characters are refused, so a
value can never end the literal and become code. Column names come from a fixed allow-list, never
from input. LIKE patterns additionally escape ``%``, ``_`` and ``\\`` so a value matches itself only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Literal

from app.errors import InvalidInput

Column = Literal["id", "scope", "category", "text"]
_COLUMNS = frozenset({"id", "scope", "category", "text"})
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
MAX_FILTER_VALUE_CHARS = 16_384


class InvalidFilterValue(InvalidInput):
    code = "invalid_filter_value"


def _column(name: str) -> str:
    if name not in _COLUMNS:
        raise ValueError(f"column {name!r} is not filterable")  # a programming error, never input
    return name


def literal(value: str) -> str:
    """A SQL string literal holding exactly ``value``.

    Raises:
        InvalidFilterValue: the value holds control characters or is absurdly long.
    """
    if not isinstance(value, str):
        raise InvalidFilterValue("filter values must be strings")
    if _CONTROL.search(value):
        raise InvalidFilterValue("filter values may not contain control characters")
    if len(value) > MAX_FILTER_VALUE_CHARS:
        raise InvalidFilterValue(f"filter values are limited to {MAX_FILTER_VALUE_CHARS} characters")
    return "'" + value.replace("'", "''") + "'"


def like_escape(value: str) -> str:
    """Escape LIKE wildcards so the pattern matches the characters themselves."""
    return value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def eq(column: Column, value: str) -> str:
    return f"{_column(column)} = {literal(value)}"


def is_in(column: Column, values: Iterable[str]) -> str:
    items = [literal(v) for v in values]
    if not items:
        return "false"
    return f"{_column(column)} IN ({', '.join(items)})"


def contains(column: Column, value: str, *, case_insensitive: bool = True) -> str:
    """``column`` contains ``value`` as a substring (works for CJK, unlike tokenised search)."""
    operator = "ILIKE" if case_insensitive else "LIKE"
    pattern = literal("%" + like_escape(value) + "%")
    return f"{_column(column)} {operator} {pattern} ESCAPE '\\'"


def has_tag(tag: str) -> str:
    """``category`` (tags joined by commas) has ``tag`` as one whole element, not a substring."""
    escaped = like_escape(tag)
    patterns = [f"{escaped},%", f"%,{escaped}", f"%,{escaped},%"]
    likes = [f"category LIKE {literal(p)} ESCAPE '\\'" for p in patterns]
    return "(" + " OR ".join([f"category = {literal(tag)}", *likes]) + ")"


def category(name: str, storage: tuple[str, ...]) -> str:
    """Rows whose storage category is ``name`` (one of ``storage``); for the last one, ``other``, also every
    row whose column holds no storage category (null, another writer's word, an earlier version's tags)."""
    if name != storage[-1]:
        return eq("category", name)
    return f"(category IS NULL OR category NOT IN ({', '.join(literal(c) for c in storage[:-1])}))"


# Rust regex metacharacters (escaping any other character is an error there).
_REGEX_META = re.compile(r"([\\.+*?()|\[\]{}^$#&\-~])")


def metadata_tag(tag: str) -> str:
    """``metadata`` (a JSON object) lists ``tag`` in its ``tags`` array, in any JSON spacing."""
    encoded = json.dumps(tag, ensure_ascii=False)
    pattern = r'"tags":\s*\[(?:"(?:[^"\\]|\\.)*",\s*)*' + _REGEX_META.sub(r"\\\1", encoded) + r"\s*[,\]]"
    return f"regexp_like(metadata, {literal(pattern)})"


def tag(name: str) -> str:
    """Rows tagged ``name``: in their metadata, or in the column of an earlier version's rows."""
    return f"({has_tag(name)} OR {metadata_tag(name)})"


def all_of(*clauses: str | None) -> str | None:
    """AND of the non-empty clauses (each parenthesised), or None when there is none."""
    present = [c for c in clauses if c]
    if not present:
        return None
    return " AND ".join(f"({c})" for c in present)


def any_of(*clauses: str | None) -> str | None:
    present = [c for c in clauses if c]
    if not present:
        return None
    return " OR ".join(f"({c})" for c in present)
