"""The one place that turns user values into LanceDB (DataFusion SQL) filter strings.

Nothing else in the package builds a ``where``/``delete`` string. User values only ever appear as
SQL string literals made by ``literal``: single quotes are doubled (the SQL rule; DataFusion does
not treat backslash as an escape inside literals) and NUL/C0 control characters are refused, so a
value can never end the literal and become code. Column names come from a fixed allow-list, never
from input. LIKE patterns additionally escape ``%``, ``_`` and ``\\`` so a value matches itself only.

Each filter is a ``Where``: the SQL string, which also answers ``test(row)`` for a row held as a dict, so
rows that are not in the table yet (the write journal's, ``app/memory/journal``) are filtered exactly as
LanceDB filters the table's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

from app.errors import InvalidInput

Column = Literal["id", "scope", "category", "text"]
_COLUMNS = frozenset({"id", "scope", "category", "text"})
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
MAX_FILTER_VALUE_CHARS = 16_384


class InvalidFilterValue(InvalidInput):
    code = "invalid_filter_value"


Row = Mapping[str, Any]


class Where(str):
    """A filter: its SQL for LanceDB, and ``test`` for one row given as a dict."""

    test: Callable[[Row], bool]

    @classmethod
    def of(cls, sql: str, test: Callable[[Row], bool]) -> Where:
        where = cls(sql)
        where.test = test
        return where


def matches(where: str | None, row: Row) -> bool:
    """Whether ``row`` passes ``where`` (None: every row).

    Raises:
        TypeError: ``where`` was not built here, so it cannot be evaluated off the table.
    """
    if where is None:
        return True
    if not isinstance(where, Where):
        raise TypeError(f"filter {where[:60]!r} was not built by app.memory.store.filters")
    return where.test(row)


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


def eq(column: Column, value: str) -> Where:
    sql = f"{_column(column)} = {literal(value)}"
    return Where.of(sql, lambda row: row.get(column) == value)


def is_in(column: Column, values: Iterable[str]) -> Where:
    wanted = list(values)
    if not wanted:
        return Where.of("false", lambda row: False)
    sql = f"{_column(column)} IN ({', '.join(literal(v) for v in wanted)})"
    members = frozenset(wanted)
    return Where.of(sql, lambda row: row.get(column) in members)


def contains(column: Column, value: str, *, case_insensitive: bool = True) -> Where:
    """``column`` contains ``value`` as a substring (works for CJK, unlike tokenised search)."""
    operator = "ILIKE" if case_insensitive else "LIKE"
    pattern = literal("%" + like_escape(value) + "%")
    needle = value.lower() if case_insensitive else value

    def test(row: Row) -> bool:
        held = row.get(column)
        return isinstance(held, str) and needle in (held.lower() if case_insensitive else held)

    return Where.of(f"{_column(column)} {operator} {pattern} ESCAPE '\\'", test)


def has_tag(tag: str) -> Where:
    """``category`` (tags joined by commas) has ``tag`` as one whole element, not a substring."""
    escaped = like_escape(tag)
    patterns = [f"{escaped},%", f"%,{escaped}", f"%,{escaped},%"]
    likes = [f"category LIKE {literal(p)} ESCAPE '\\'" for p in patterns]
    sql = "(" + " OR ".join([f"category = {literal(tag)}", *likes]) + ")"
    return Where.of(sql, lambda row: isinstance(row.get("category"), str) and tag in row["category"].split(","))


def category(name: str, storage: tuple[str, ...]) -> Where:
    """Rows whose storage category is ``name`` (one of ``storage``); for the last one, ``other``, also every
    row whose column holds no storage category (null, another writer's word, an earlier version's tags)."""
    if name != storage[-1]:
        return eq("category", name)
    sql = f"(category IS NULL OR category NOT IN ({', '.join(literal(c) for c in storage[:-1])}))"
    named = frozenset(storage[:-1])
    return Where.of(sql, lambda row: row.get("category") not in named)


# Rust regex metacharacters (escaping any other character is an error there).
_REGEX_META = re.compile(r"([\\.+*?()|\[\]{}^$#&\-~])")


def metadata_tag(tag: str) -> Where:
    """``metadata`` (a JSON object) lists ``tag`` in its ``tags`` array, in any JSON spacing."""
    encoded = json.dumps(tag, ensure_ascii=False)
    pattern = r'"tags":\s*\[(?:"(?:[^"\\]|\\.)*",\s*)*' + _REGEX_META.sub(r"\\\1", encoded) + r"\s*[,\]]"
    compiled = re.compile(pattern)
    # The regexp reads the JSON text, as LanceDB's does: the same rows match either way.
    return Where.of(f"regexp_like(metadata, {literal(pattern)})",
                    lambda row: isinstance(row.get("metadata"), str) and compiled.search(row["metadata"]) is not None)


def tag(name: str) -> Where:
    """Rows tagged ``name``: in their metadata, or in the column of an earlier version's rows."""
    either = any_of(has_tag(name), metadata_tag(name))
    assert either is not None  # noqa: S101 - two clauses given
    return Where.of(f"({either})", either.test)


def all_of(*clauses: str | None) -> Where | None:
    """AND of the non-empty clauses (each parenthesised), or None when there is none."""
    present = [c for c in clauses if c]
    if not present:
        return None
    return Where.of(" AND ".join(f"({c})" for c in present), lambda row: all(matches(c, row) for c in present))


def any_of(*clauses: str | None) -> Where | None:
    present = [c for c in clauses if c]
    if not present:
        return None
    return Where.of(" OR ".join(f"({c})" for c in present), lambda row: any(matches(c, row) for c in present))
