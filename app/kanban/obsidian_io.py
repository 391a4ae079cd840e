"""Import an Obsidian vault (``Kanban.md`` + ``task/<id>.md``) into the store, and export it back.

What the store does not model is kept in the task's ``extra`` and the ``obsidian_board`` layout, so
an import followed by an export reproduces the files byte for byte. Writes are atomic (temp file in
the same directory, fsync, ``os.replace``, fsync of the directory).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from app.kanban.errors import ObsidianFormatError, TaskNotFound, VaultEscape
from app.kanban.frontmatter import Entry, FrontMatter, parse_document, render_document, render_entry, split_lines
from app.kanban.models import ExportReport, ImportReport, Task
from app.kanban.obsidian import BoardCard, ParsedCard, card_line, default_layout, parse_board, render_board
from app.kanban.store import TaskStore

BOARD_META = "obsidian_board"
BOARD_FILE = "Kanban.md"
MAX_FILE_BYTES = 10 * 1024 * 1024
MODELED = ["title", "assignee", "current_step", "step1", "step2", "step3", "step4", "priority", "tags"]
MAX_SLUG_BYTES = 120
LINK_FORBIDDEN = set('\\/:*?"<>|[]#^%')


def _locate(path: Path) -> tuple[Path, Path]:
    """(vault dir, board file) for a vault directory or a board file path."""
    return (path, path / BOARD_FILE) if path.is_dir() or not path.suffix else (path.parent, path)


def _inside(vault: Path, candidate: Path) -> Path:
    real = candidate.resolve()
    if not real.is_relative_to(vault.resolve()):
        raise VaultEscape(f"{candidate} points outside the vault {vault}")
    return real


def _read(path: Path) -> str:
    data = path.read_bytes()
    if len(data) > MAX_FILE_BYTES:
        raise ObsidianFormatError(f"{path} is larger than {MAX_FILE_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ObsidianFormatError(f"{path} is not UTF-8: {exc}") from exc


def link_tail(link: str) -> str:
    name = link.rsplit("/", 1)[-1]
    parts = name.split("-", 2)
    return parts[2] if len(parts) == 3 and parts[2] else name


def default_link(task: Task) -> str:
    slug = "-".join("".join(c for c in task.title if c not in LINK_FORBIDDEN and c.isprintable()).split())
    while len(slug.encode()) > MAX_SLUG_BYTES:  # file names are limited to 255 bytes, not characters
        slug = slug[:-1]
    return f"{task.id}-{slug}".rstrip("-")


def modeled(task: Task) -> dict[str, Any]:
    steps = task.steps + [None] * (4 - len(task.steps))
    return {
        "title": task.title, "assignee": task.assignee or None, "current_step": task.current_step,
        "step1": steps[0], "step2": steps[1], "step3": steps[2], "step4": steps[3],
        "priority": task.priority, "tags": task.tags or None,
    }


def _fields(card: ParsedCard, matter: FrontMatter, body: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Store fields for one card, and the body's surrounding whitespace kept for the export."""
    steps = [str(matter.get(f"step{i}")) for i in range(1, 5) if matter.get(f"step{i}")]
    raw_step = matter.get("current_step")
    tags = matter.get("tags")
    title = matter.get("title")
    lines = split_lines(body)
    prefix_n = 0
    while prefix_n < len(lines) and not lines[prefix_n].strip():
        prefix_n += 1
    rest = "".join(lines[prefix_n:])
    description = rest.rstrip()
    fields = {
        "title": title if isinstance(title, str) and title else link_tail(card.link),
        "description": description,
        "assignee": str(matter.get("assignee") or ""),
        "status": card.status,
        "steps": steps,
        "current_step": int(raw_step) if isinstance(raw_step, str) and raw_step.isdigit() else None,
        "priority": matter.get("priority") if isinstance(matter.get("priority"), str) else None,
        "tags": [t for t in tags if t] if isinstance(tags, list) else [],
    }
    body_parts = {"body_prefix": "".join(lines[:prefix_n]), "body_suffix": rest[len(description):]}
    return fields, body_parts


def _note(vault: Path, card: ParsedCard) -> tuple[str | None, str]:
    """(path relative to the vault, text) of the card's note; (None, "") when it has none."""
    name = card.link.rsplit("/", 1)[-1]
    for candidate in (vault / "task" / f"{name}.md", vault / f"{card.link}.md", vault / "task" / f"{card.task_id}.md"):
        if candidate.is_file():
            real = _inside(vault, candidate)
            return real.relative_to(vault.resolve()).as_posix(), _read(real)
    return None, ""


def import_obsidian(store: TaskStore, path: Path, *, actor: str = "obsidian-import") -> ImportReport:
    """Load a board and its task notes; existing tasks with the same id are overwritten.

    Raises:
        ObsidianFormatError: unreadable files. VaultEscape: a note links outside the vault.
    """
    vault, board_path = _locate(path)
    layout, cards, skipped = parse_board(_read(board_path))
    report = ImportReport(cards=len(cards), skipped_columns=skipped)
    for card in cards:
        rel, text = _note(vault, card)
        bom = text.startswith("\ufeff")
        matter, body = parse_document(text.removeprefix("\ufeff"))
        fields, body_parts = _fields(card, matter, body)
        probe = Task(id=card.task_id, created_ms=0, updated_ms=0, **fields)
        extra = {"obsidian": {
            "link": card.link, "file": rel, "bom": bom, "present": matter.present,
            "open": matter.open_line, "close": matter.close_line,
            "matter": [[e.key, e.lines] for e in matter.entries], "fm_values": modeled(probe),
            "newline": "\r\n" if "\r\n" in text else "\n", **body_parts,
        }}
        try:
            store.get(card.task_id)
        except TaskNotFound:
            store.create(dict(fields), task_id=card.task_id, actor=actor, extra=extra, position=card.position)
            report.created += 1
        else:
            store.replace_imported(card.task_id, fields, extra, card.position, actor)
            report.updated += 1
    store.set_meta(BOARD_META, json.dumps({"layout": layout, "board_file": board_path.name}))
    return report


def _render_matter(task: Task, info: dict[str, Any], link: str) -> FrontMatter:
    """The stored front matter with the modelled keys brought up to date; unchanged keys stay raw."""
    newline = info.get("newline", "\n")
    current, original = modeled(task), info.get("fm_values", {"title": link_tail(link)})
    entries: list[Entry] = []
    for key, lines in info.get("matter", []):
        if key not in MODELED or current[key] == original.get(key):
            entries.append(Entry(key, lines))
        elif current[key] is not None:
            entries.append(Entry(key, render_entry(key, current[key], newline)))
    present = {entry.key for entry in entries} | {key for key, _ in info.get("matter", [])}
    for key in MODELED:
        if key not in present and current[key] is not None and current[key] != original.get(key):
            entries.append(Entry(key, render_entry(key, current[key], newline)))
    return FrontMatter(entries=entries, present=bool(info.get("present", True)) or bool(entries),
                       open_line=info.get("open", "---" + newline), close_line=info.get("close", "---" + newline))


def render_note(task: Task, info: dict[str, Any], link: str) -> str:
    matter = _render_matter(task, info, link)
    prefix = info.get("body_prefix", "\n" if matter.present else "")
    suffix = info.get("body_suffix", "\n" if task.description else "")
    text = render_document(matter, prefix + task.description + suffix)
    return ("\ufeff" if info.get("bom") else "") + text


def atomic_write(path: Path, data: bytes) -> bool:
    """Replace ``path`` with ``data`` (never a partial file); False when it already holds exactly that."""
    if path.is_file() and path.read_bytes() == data:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the rename itself survives a power loss only once the directory is synced
    finally:
        os.close(dir_fd)
    return True


def export_obsidian(store: TaskStore, path: Path) -> ExportReport:
    """Write ``Kanban.md`` and one note per task in the imported layout (or a fresh default one).

    Raises:
        VaultEscape: a note path would land outside the target directory.
    """
    meta = store.get_meta(BOARD_META)
    stored = json.loads(meta) if meta else {"layout": default_layout(), "board_file": BOARD_FILE}
    vault, board_path = _locate(path) if path.suffix else (path, path / stored["board_file"])
    vault.mkdir(parents=True, exist_ok=True)
    cards: list[BoardCard] = []
    notes = 0
    for task, extra, _ in store.extras():
        info = extra.get("obsidian", {})
        link = info.get("link") or default_link(task)
        cards.append(BoardCard(task.id, task.status, card_line(link, task.status)))
        rel = info.get("file") if info else f"task/{link.rsplit('/', 1)[-1]}.md"
        if rel is None and not (task.description or task.assignee):
            continue  # imported without a note and still nothing to say: do not invent a file
        target = _inside(vault, vault / (rel or f"task/{link.rsplit('/', 1)[-1]}.md"))
        atomic_write(target, render_note(task, info, link).encode("utf-8"))
        notes += 1
    atomic_write(board_path, render_board(stored["layout"], cards).encode("utf-8"))
    return ExportReport(board_path=str(board_path), task_files=notes)
