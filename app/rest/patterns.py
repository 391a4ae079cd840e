"""Patterns for the OpenAPI schema, each the exact language of the domain check behind the field.

Schema-driven clients and fuzzers draw values from these patterns: one looser than its check makes
valid-looking requests fail, one stricter leaves accepted values undocumented. So each pattern spells
out what the check does, trimming included (``str.strip()`` removes the ``WHITESPACE`` characters), and
``tests/rest/test_patterns.py`` holds each one against its check. Only explicit character classes are
used, never ``\\w``, ``\\s`` or ``.``: ECMA-262 (JSON Schema), Python ``re`` and Rust ``regex`` read
those differently, and all three read these schemas.
"""

from __future__ import annotations

from collections.abc import Iterable

from app.memory.validation import MEMORY_ID

#: What ``str.strip()`` removes: every character whose ``isspace()`` is true (all in the BMP).
WHITESPACE = "".join(chr(code) for code in range(0x10000) if chr(code).isspace())
#: The memory service's refused control characters (``app.memory.validation._CONTROL``).
MEMORY_CONTROLS = "".join(chr(code) for code in [*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F])
_NUL = "\x00"
_ANY = r"[\s\S]"  # every character in all three dialects, newlines included


def _escape(char: str) -> str:
    if char.isascii() and (char.isalnum() or char in " _@/:.,"):
        return char
    return f"\\u{ord(char):04x}"


def char_class(chars: Iterable[str], *, negate: bool = False) -> str:
    """A ``[...]`` class of ``chars`` (``[^...]`` when negated); runs of three or more become ranges."""
    codes = sorted({ord(char) for char in chars})
    parts: list[str] = []
    start = 0
    while start < len(codes):
        end = start
        while end + 1 < len(codes) and codes[end + 1] == codes[end] + 1:
            end += 1
        first, last = chr(codes[start]), chr(codes[end])
        if end - start >= 2:
            parts.append(f"{_escape(first)}-{_escape(last)}")
        else:
            parts.extend(_escape(chr(code)) for code in codes[start : end + 1])
        start = end + 1
    return f"[{'^' if negate else ''}{''.join(parts)}]"


_W = char_class(WHITESPACE)


def _trimmed(core: str, *, optional: bool = False) -> str:
    """Whitespace around ``core``, as ``strip()`` takes it off before the check."""
    return f"^{_W}*(?:{core}){'?' if optional else ''}{_W}*$"


def _edges_not_blank(refused: str) -> str:
    """A stripped value of characters not in ``refused``: it starts and ends with a non-space."""
    inner = char_class(refused, negate=True)
    edge = char_class(refused + WHITESPACE, negate=True)
    return f"{edge}(?:{inner}*{edge})?"


# --- memory ------------------------------------------------------------------------------------

MEMORY_ID_PATTERN = MEMORY_ID.pattern
#: ``check_text``: not blank, no control character other than tab, newline and carriage return.
MEMORY_TEXT_PATTERN = (
    f"^{char_class(set(WHITESPACE) - set(MEMORY_CONTROLS))}*{char_class(MEMORY_CONTROLS + WHITESPACE, negate=True)}"
    f"{char_class(MEMORY_CONTROLS, negate=True)}*$"
)
#: ``check_scope``, ASCII names: the service also takes letters and digits of other scripts after the first.
SCOPE_PATTERN = _trimmed(r"global|(?:agent|project|user|custom):[A-Za-z0-9][A-Za-z0-9_.@/\-]{0,127}")


def category_pattern(max_tags: int, max_tag_chars: int) -> str:
    """``split_category`` + ``check_tags``: comma-separated tags, blank parts dropped, each stripped tag at most
    ``max_tag_chars`` long, at most ``max_tags`` of them (the service also forgives repeats; this counts them)."""
    edge = char_class("," + MEMORY_CONTROLS + WHITESPACE, negate=True)
    inner = char_class("," + MEMORY_CONTROLS, negate=True)
    tag = edge if max_tag_chars < 2 else f"{edge}(?:{inner}{{0,{max_tag_chars - 2}}}{edge})?"
    blank, filled = f"{_W}*", f"{_W}*{tag}{_W}*"
    if max_tags == 0:
        return f"^{blank}(?:,{blank})*$"
    rest = f"(?:,{filled}(?:,{blank})*){{0,{max_tags - 1}}}"
    return f"^(?:{blank},)*(?:{filled}(?:,{blank})*{rest}|{blank})$"


# --- kanban ------------------------------------------------------------------------------------


def _letters(word: str) -> str:
    """``word`` as ``normalize_task_id`` compares it: ``upper()`` of each character (so ``ſ`` is an S)."""
    return "".join(char_class(chr(c) for c in range(0x10000) if chr(c).upper() == letter) for letter in word)


_TASK_HEAD = f"{_letters('TASK')}-[0-9]{{5,9}}"
#: ``normalize_task_id``: TASK-00001, or the long form TASK-00001-<title>, any case.
TASK_ID_PATTERN = _trimmed(f"{_TASK_HEAD}(?:-{_ANY}*)?")
#: The same in a URL path, where a ``/`` would end the segment.
TASK_ID_PATH_PATTERN = _trimmed(f"{_TASK_HEAD}(?:-[^/]*)?")
#: ``create_task``'s explicit id: an empty one means "the next id", as leaving it out does.
NEW_TASK_ID_PATTERN = f"^$|{TASK_ID_PATTERN}"
#: Filter values (``app.memory.store.filters.literal``): no control characters.
FILTER_VALUE_PATTERN = f"^{char_class(MEMORY_CONTROLS, negate=True)}*$"

_Y = char_class("[]\n\r" + _NUL, negate=True)
_Y_EDGE = char_class("[]" + _NUL + WHITESPACE, negate=True)
_BRACKETS = r"(?:\[(?:\]\[)*\]?|\](?:\[\])*\[?)"  # a run of brackets that never doubles one
#: ``check_title``: one line, not blank, never ``[[`` or ``]]`` (maxLength bounds it).
TITLE_PATTERN = _trimmed(
    f"{_Y_EDGE}(?:{_Y}*{_Y_EDGE})?|(?:{_Y_EDGE}{_Y}*)?{_BRACKETS}(?:{_Y}+{_BRACKETS})*(?:{_Y}*{_Y_EDGE})?"
)
#: ``check_name``: one line, not blank (assignee, step assignees).
NAME_PATTERN = _trimmed(_edges_not_blank("\n\r" + _NUL))
#: ``check_name(allow_empty=True)``: one line, may be blank (priority, note author).
OPTIONAL_NAME_PATTERN = _trimmed(_edges_not_blank("\n\r" + _NUL), optional=True)
#: ``check_note``: not blank, no NUL.
NOTE_PATTERN = _trimmed(_edges_not_blank(_NUL))
#: Card tags (``app.kanban.validation.check_tags``): a blank tag is dropped, a tag is one line.
CARD_TAG_PATTERN = _trimmed(_edges_not_blank("\n"), optional=True)
#: No NUL anywhere: descriptions and job arguments.
NO_NUL_PATTERN = f"^{char_class(_NUL, negate=True)}*$"
