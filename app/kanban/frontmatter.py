"""A small, strict reader and writer for the front matter of task notes (no YAML dependency).

It understands what task notes use: ``key: scalar`` lines, quoted scalars, and a list of tags in flow
(``[a, b]``) or block (``- a``) form. Every entry keeps its raw lines, so an unchanged value is written
back byte for byte and keys this module does not model survive a round trip untouched.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

FENCE = "---"
RESERVED_WORDS = {"", "~", "null", "true", "false", "yes", "no", "on", "off"}
PLAIN_SAFE = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./@+- ")


def split_lines(text: str) -> list[str]:
    """Lines with their ``\\n`` kept (only ``\\n`` splits: a title may contain any other separator)."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def strip_eol(line: str) -> str:
    return line[:-1].removesuffix("\r") if line.endswith("\n") else line


@dataclass
class Entry:
    key: str | None
    lines: list[str]

    def value(self) -> Any:
        """The parsed value: a scalar string (or None), or a list for a block/flow sequence."""
        head = strip_eol(self.lines[0]).split(":", 1)[1] if self.key is not None else ""
        rest = [strip_eol(line).strip() for line in self.lines[1:] if strip_eol(line).strip()]
        if rest and head.strip() == "" and all(item.startswith("- ") or item == "-" for item in rest):
            return [parse_scalar(item[1:]) or "" for item in rest]
        if rest:
            return None  # a nested mapping or multi-line scalar: kept raw, never interpreted
        text = head.strip()
        if text.startswith("[") and text.endswith("]"):
            inner = text[1:-1].strip()
            return [parse_scalar(part) or "" for part in inner.split(",")] if inner else []
        return parse_scalar(text)


@dataclass
class FrontMatter:
    entries: list[Entry] = field(default_factory=list)
    present: bool = False
    open_line: str = "---\n"
    close_line: str = "---\n"

    def get(self, key: str) -> Any:
        for entry in self.entries:
            if entry.key == key:
                return entry.value()
        return None

    def keys(self) -> list[str]:
        return [entry.key for entry in self.entries if entry.key is not None]


def parse_scalar(raw: str) -> str | None:
    """A plain, 'single' or "double" quoted scalar, with an optional trailing ``# comment``."""
    text = raw.strip()
    if text[:1] in ("'", '"'):
        end = _closing_quote(text)
        if end > 0 and (text[end + 1 :].strip() == "" or text[end + 1 :].lstrip().startswith("#")):
            inner = text[: end + 1]
            if inner[0] == "'":
                return inner[1:-1].replace("''", "'")
            try:
                value = json.loads(inner)
            except ValueError:
                return inner[1:-1]
            return value if isinstance(value, str) else inner[1:-1]
    cut = text.find(" #")
    if cut >= 0:
        text = text[:cut].rstrip()
    return None if text in ("", "~", "null") else text


def _closing_quote(text: str) -> int:
    """Index of the quote that closes ``text[0]``, or -1 (one pass: no backtracking)."""
    quote, index = text[0], 1
    while index < len(text):
        char = text[index]
        if quote == '"' and char == "\\":
            index += 2
            continue
        if char == quote:
            if quote == "'" and text[index + 1 : index + 2] == "'":
                index += 2
                continue
            return index
        index += 1
    return -1


def render_scalar(value: str) -> str:
    plain = (
        value == value.strip()
        and value.lower() not in RESERVED_WORDS
        and all(c in PLAIN_SAFE for c in value)
        and value[0] not in "-@"
    )
    return value if plain else json.dumps(value, ensure_ascii=False)


def render_entry(key: str, value: str | int | list[str], newline: str) -> list[str]:
    if isinstance(value, list):
        return [f"{key}: [{', '.join(render_scalar(v) for v in value)}]{newline}"]
    return [f"{key}: {value if isinstance(value, int) else render_scalar(value)}{newline}"]


def parse_document(text: str) -> tuple[FrontMatter, str]:
    """Split a note into its front matter and its body; no closing fence means no front matter."""
    lines = split_lines(text)
    if not lines or strip_eol(lines[0]) != FENCE:
        return FrontMatter(), text
    for index in range(1, len(lines)):
        if strip_eol(lines[index]) == FENCE:
            matter = FrontMatter(entries=_entries(lines[1:index]), present=True,
                                 open_line=lines[0], close_line=lines[index])
            return matter, "".join(lines[index + 1 :])
    return FrontMatter(), text


def _entries(lines: list[str]) -> list[Entry]:
    entries: list[Entry] = []
    for line in lines:
        content = strip_eol(line)
        continuation = not content.strip() or content[0] in " \t#" or content.startswith("- ")
        if continuation and entries:
            entries[-1].lines.append(line)
            continue
        key, colon, _ = content.partition(":")
        is_key = bool(colon) and key.strip() == key and key != "" and " " not in key
        entries.append(Entry(key=key if is_key else None, lines=[line]))
    return entries


def render_document(matter: FrontMatter, body: str) -> str:
    if not matter.present:
        return body
    inner = "".join(line for entry in matter.entries for line in entry.lines)
    return matter.open_line + inner + matter.close_line + body
