"""A sample Obsidian vault in the original layout: Kanban.md plus task/<id>.md notes."""

from __future__ import annotations

from pathlib import Path

BOARD = """---

kanban-plugin: basic

---

## 📋 Backlog

- [ ] [[TASK-00004-Write the docs]]


## 📅 Todo

- [ ] [[TASK-00001-Fix login bug]]
- [ ] [[TASK-00002-Add dark mode]]
- [ ] Call the vendor about licences


## 🏃 In Progress

- [ ] [[TASK-00003-Migrate database]] @{2026-12-01}


## 👀 Review



## ✅ Done

**Complete**
- [x] [[TASK-00005-Release v1.0]]


## 🗂 Someday

- [ ] [[TASK-00009-Maybe later]]


## ⛔ Blocked

- [ ] [[task/TASK-00006-Waiting on API keys|API keys]]




%% kanban:settings
```
{"kanban-plugin":"basic","lane-width":300}
```
%%"""

NOTES = {
    "TASK-00001-Fix login bug.md": """---
assignee: claude-code
current_step: 1
step1: claude-code
step2: antigravity
created: 2026-11-30
---

## Goal
Users cannot log in with SSO.

- [ ] reproduce
- [ ] fix
""",
    "TASK-00002-Add dark mode.md": """---
assignee: "openclaw"   # quoted on purpose
tags: [ui, "theme"]
links:
  - https://example.com/design
  - docs
priority: high
---
Switch colours with the system setting.


""",
    "TASK-00003-Migrate database.md": "---\r\nassignee: antigravity\r\ncurrent_step: 2\r\nstep1: claude-code\r\n"
    "step2: antigravity\r\nstep3: openclaw\r\n---\r\n\r\nMove the tables.\r\n",
    "TASK-00004-Write the docs.md": "Only a description, no front matter.\n",
    "TASK-00005-Release v1.0.md": "---\nassignee: human\n---\n",
    "TASK-00006-Waiting on API keys.md": "\ufeff---\nassignee: 'ops''team'\nstatus: blocked\n---\n\nAsk for keys.\n",
}


def write_vault(root: Path, board: str = BOARD) -> Path:
    (root / "task").mkdir(parents=True, exist_ok=True)
    (root / "Kanban.md").write_bytes(board.encode())
    for name, text in NOTES.items():
        (root / "task" / name).write_bytes(text.encode())
    return root


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` by relative path."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
