"""The board as text a model reads: the open cards, one task in full, and what an agent should do next.

The MCP prompts and resources hand these to the agent's model as they are (the adapter only wraps
them in a message); Markdown, because every client shows it and every model reads it.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime

from app.kanban import validation as check
from app.kanban.models import COLUMN_TITLES, STATUSES, Board, Card, Task, TaskDetail
from app.kanban.service import KanbanService

CLOSED = ("done", "canceled")
_PRIORITY_RANK = {"urgent": 0, "critical": 0, "p0": 0, "high": 1, "p1": 1, "medium": 2, "normal": 2, "p2": 2,
                  "low": 3, "p3": 3}
MAX_BACKLOG_LISTED = 5
CLAIM_HINT = 'Claim a card before starting it: move_card(task_id, "running", expected_status="todo").'


async def board_text(service: KanbanService, status: str | None = None) -> str:
    """The open cards by column, then by assignee (or one column, closed ones included).

    Raises:
        InvalidStatus: ``status`` is no column.
    """
    wanted = check.check_status(status) if status else None
    return render_board(await service.get_board(), wanted)


async def task_text(service: KanbanService, task_id: str) -> str:
    """One task with its description, steps, notes, history and jobs. Raises: InvalidTaskId, TaskNotFound."""
    return render_task(await service.get_task(task_id))


async def next_text(service: KanbanService, agent: str) -> str:
    """What ``agent`` should work on next. Raises: InvalidInput: an empty or malformed name."""
    name = check.check_name(agent, "agent")
    return render_next(name, await service.list_tasks())


def render_board(board: Board, status: str | None = None) -> str:
    columns = [c for c in board.columns if (c.status == status if status else c.status not in CLOSED)]
    shown = sum(len(c.cards) for c in columns)
    heading = f"# The board: {COLUMN_TITLES[status]}" if status else "# The board: open cards"
    lines = [f"{heading} ({_count(shown, 'card')})"]
    if not status:
        closed = [f"{c.title} {len(c.cards)}" for c in board.columns if c.status in CLOSED and c.cards]
        if closed:
            lines.append(f"Not shown: {', '.join(closed)}.")
    for column in columns:
        if not column.cards:
            continue
        lines += ["", f"## {column.title} ({len(column.cards)})"]
        by_assignee: dict[str, list[Card]] = defaultdict(list)
        for card in column.cards:
            by_assignee[card.assignee].append(card)
        for assignee in sorted(by_assignee, key=str.lower):
            lines.append(f"- {assignee}")
            lines += [f"  - {_card_line(card.id, card.title, card.priority)}" for card in by_assignee[assignee]]
    if shown == 0:
        lines += ["", "No cards here."]
    return "\n".join(lines) + "\n"


def render_task(task: TaskDetail) -> str:
    facts = [f"status: {task.status}", f"assignee: {task.assignee}"]
    facts += [f"priority: {task.priority}"] if task.priority else []
    facts += [f"tags: {', '.join(task.tags)}"] if task.tags else []
    lines = [f"# {task.id}: {task.title}", " · ".join(facts)]
    if task.steps:
        steps = [f"{n}. {owner}{' (current)' if n == task.current_step else ''}"
                 for n, owner in enumerate(task.steps, start=1)]
        lines.append("steps: " + " → ".join(steps))
    retried = f" · back in progress {_count(task.retry_count, 'time')}" if task.retry_count else ""
    lines.append(f"created {_iso(task.created_ms)} · updated {_iso(task.updated_ms)}{retried}")
    lines += ["", "## Description", task.description.strip() or "(none)"]
    lines += ["", f"## Notes ({len(task.notes)})"]
    lines += [f"- {_iso(n.created_ms)} {n.author or 'someone'}: {n.text}" for n in task.notes] or ["(none)"]
    lines += ["", "## History"]
    for entry in task.history:
        move = f"created in {entry.to_status}" if entry.from_status is None else \
            f"{entry.from_status} → {entry.to_status}"
        lines.append(f"- {_iso(entry.at_ms)} {move}" + (f" by {entry.actor}" if entry.actor else ""))
    if task.jobs:
        lines += ["", "## Jobs"]
        for job in task.jobs:
            exit_code = f" (exit {job.exit_code})" if job.exit_code is not None else ""
            lines.append(f"- {job.id}: {job.status}{exit_code}, started {_iso(job.started_ms)}")
    return "\n".join(lines) + "\n"


def render_next(agent: str, tasks: list[Task]) -> str:
    mine = [task for task in tasks if owner(task) == agent]
    groups = {status: sorted((t for t in mine if t.status == status), key=_urgency) for status in STATUSES}
    lines = [f"# Next for {agent}"]
    if not any(groups[s] for s in STATUSES if s not in CLOSED):
        lines.append(f"Nothing open on the board is {agent}'s. The todo column may hold unassigned work: "
                     "read the board.")
        return "\n".join(lines) + "\n"
    sections = [
        ("running", "In progress: finish these first"),
        ("todo", "Next up: todo, most urgent first"),
        ("review", "In review: answer what the reviewers noted"),
        ("blocked", "Blocked"),
        ("waiting", "Waiting"),
    ]
    for status, heading in sections:
        if groups[status]:
            lines += ["", f"## {heading}"]
            lines += [f"- {_card_line(t.id, t.title, t.priority)}" for t in groups[status]]
    if groups["backlog"]:
        listed = groups["backlog"][:MAX_BACKLOG_LISTED]
        lines += ["", f"## Backlog ({len(groups['backlog'])})"]
        lines += [f"- {_card_line(t.id, t.title, t.priority)}" for t in listed]
    if groups["todo"]:
        lines += ["", CLAIM_HINT]
    return "\n".join(lines) + "\n"


def owner(task: Task) -> str:
    """Who acts on a task now: the owner of its current step in a relay, else its assignee."""
    if task.steps and task.current_step and 1 <= task.current_step <= len(task.steps):
        return task.steps[task.current_step - 1]
    return task.assignee


def _urgency(task: Task) -> tuple[float, int]:
    rank = 4.0 if not task.priority else _PRIORITY_RANK.get(task.priority.strip().lower(), 2.5)
    return rank, check.task_number(task.id)


def _card_line(task_id: str, title: str, priority: str | None) -> str:
    return f"{task_id} {title}" + (f" [{priority}]" if priority else "")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")
