"""The Obsidian Kanban board file: parse it into a layout that keeps every byte, render it back.

A ``Kanban.md`` is a preamble (front matter), ``## <emoji> <Column>`` sections holding
``- [ ] [[TASK-00001-title]]`` cards, and a trailing ``%% kanban:settings`` block. Lines this module
does not model (plain cards, notes, the settings) are kept verbatim; a task card remembers its raw
line so an untouched card is written back unchanged. Parsing is one pass over the lines, no regex.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.kanban.errors import InvalidTaskId
from app.kanban.frontmatter import split_lines, strip_eol
from app.kanban.models import STATUSES
from app.kanban.validation import normalize_task_id

HEADER_WORDS: dict[str, str] = {
    "backlog": "backlog", "todo": "todo", "to do": "todo", "to-do": "todo", "next": "todo",
    "in progress": "running", "running": "running", "doing": "running", "progress": "running",
    "review": "review", "in review": "review", "reviewing": "review",
    "done": "done", "complete": "done", "completed": "done",
    "canceled": "canceled", "cancelled": "canceled",
    "waiting": "waiting", "on hold": "waiting", "blocked": "blocked",
}
DEFAULT_HEADERS: dict[str, str] = {
    "backlog": "## 📋 Backlog", "todo": "## 📅 Todo", "running": "## 🏃 In Progress", "review": "## 👀 Review",
    "done": "## ✅ Done", "canceled": "## 🚫 Canceled", "waiting": "## ⏳ Waiting", "blocked": "## ⛔ Blocked",
}
SETTINGS_MARK = "%% kanban:settings"
DEFAULT_PREAMBLE = "---\n\nkanban-plugin: basic\n\n---\n\n"
DEFAULT_TRAILER = '\n\n%% kanban:settings\n```\n{"kanban-plugin":"basic"}\n```\n%%'


@dataclass
class ParsedCard:
    task_id: str
    link: str
    checked: bool
    status: str
    position: int


def header_status(line: str) -> str | None:
    """``## 🏃 In Progress`` -> ``running``; None for a column this board does not model."""
    text = strip_eol(line)[3:]
    words = "".join(c.lower() if c.isalpha() or c in " -" else " " for c in text)
    return HEADER_WORDS.get(" ".join(words.split()))


def parse_card(line: str) -> tuple[str, str, bool] | None:
    """``- [x] [[TASK-00001-title]] ...`` -> (task id, link, checked); None for any other line."""
    content = strip_eol(line)
    if not (content.startswith("- [") and content[4:8] == "] [[" and content[3:4] in (" ", "x", "X")):
        return None
    end = content.find("]]", 8)
    if end < 0:
        return None
    link = content[8:end].split("|", 1)[0].split("#", 1)[0]
    name = link.rsplit("/", 1)[-1]
    try:
        return normalize_task_id(name), link, content[3] != " "
    except InvalidTaskId:
        return None


def parse_board(text: str) -> tuple[dict[str, Any], list[ParsedCard], list[str]]:
    """The layout (JSON-able), the task cards in board order, and the headers of unmodelled columns."""
    lines = split_lines(text)
    layout: dict[str, Any] = {"newline": "\r\n" if "\r\n" in text else "\n", "preamble": [], "sections": [],
                              "trailer": []}
    cards: list[ParsedCard] = []
    skipped: list[str] = []
    seen: set[str] = set()
    section: dict[str, Any] | None = None
    for index, line in enumerate(lines):
        if strip_eol(line).startswith(SETTINGS_MARK):
            layout["trailer"] = lines[index:]
            break
        if line.startswith("## "):
            section = {"header": line, "status": header_status(line), "items": []}
            if section["status"] is None:
                skipped.append(strip_eol(line))
            layout["sections"].append(section)
            continue
        if section is None:
            layout["preamble"].append(line)
            continue
        card = parse_card(line) if section["status"] is not None else None
        if card is None or card[0] in seen:
            section["items"].append({"raw": line})
            continue
        seen.add(card[0])
        section["items"].append({"raw": line, "task": card[0]})
        cards.append(ParsedCard(card[0], card[1], card[2], section["status"], len(cards)))
    return layout, cards, skipped


def default_layout() -> dict[str, Any]:
    sections = [{"header": DEFAULT_HEADERS[s] + "\n", "status": s, "items": _empty_items()} for s in STATUSES]
    return {"newline": "\n", "preamble": [DEFAULT_PREAMBLE], "sections": sections, "trailer": [DEFAULT_TRAILER]}


def _empty_items() -> list[dict[str, str]]:
    return [{"raw": "\n"}, {"raw": "\n"}, {"raw": "\n"}]


@dataclass
class BoardCard:
    task_id: str
    status: str
    line: str  # the rendered card line without its newline, for cards not written before


def render_board(layout: dict[str, Any], cards: list[BoardCard]) -> str:
    """Write the layout back with the current cards: untouched cards keep their raw line."""
    newline = layout["newline"]
    by_status: dict[str, list[BoardCard]] = {status: [] for status in STATUSES}
    for card in cards:
        by_status[card.status].append(card)
    sections = list(layout["sections"])
    present = {s["status"] for s in sections}
    for status in STATUSES:
        if status not in present and by_status[status]:
            items = [{"raw": newline}, {"raw": newline}, {"raw": newline}]
            sections.append({"header": DEFAULT_HEADERS[status] + newline, "status": status, "items": items})
    out: list[str] = list(layout["preamble"])
    for section in sections:
        out.append(section["header"])
        status = section["status"]
        if status is None:
            out.extend(item["raw"] for item in section["items"])
            continue
        out.extend(_render_section(section["items"], by_status[status], newline))
    out.extend(layout["trailer"])
    return "".join(out)


def _render_section(items: list[dict[str, str]], cards: list[BoardCard], newline: str) -> list[str]:
    here = {card.task_id for card in cards}
    slotted = {item["task"] for item in items if "task" in item}
    new_lines = [card.line + newline for card in cards if card.task_id not in slotted]
    card_indexes = [i for i, item in enumerate(items) if "task" in item or item["raw"].startswith("- [")]
    insert_at = card_indexes[-1] + 1 if card_indexes else _first_slot(items)
    out: list[str] = []
    for index, item in enumerate(items):
        if index == insert_at:
            out.extend(new_lines)
        if "task" not in item or item["task"] in here:
            out.append(item["raw"])
    if insert_at >= len(items):
        out.extend(new_lines)
    return out


def _first_slot(items: list[dict[str, str]]) -> int:
    """Where the first card of an empty column goes: after the blank line under the header."""
    return 1 if items and not strip_eol(items[0]["raw"]).strip() else 0


def card_line(link: str, status: str) -> str:
    return f"- [{'x' if status == 'done' else ' '}] [[{link}]]"
