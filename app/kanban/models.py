"""Kanban models returned by the service: tasks, notes, history, jobs and the board."""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, Field

#: A board column, as tool schemas list it (an ``enum``); the Obsidian header "In Progress" is ``running``.
TaskStatus = Literal["backlog", "todo", "running", "review", "done", "canceled", "waiting", "blocked"]
#: Board order.
STATUSES: tuple[str, ...] = get_args(TaskStatus)
COLUMN_TITLES: dict[str, str] = {
    "backlog": "Backlog",
    "todo": "Todo",
    "running": "In Progress",
    "review": "Review",
    "done": "Done",
    "canceled": "Canceled",
    "waiting": "Waiting",
    "blocked": "Blocked",
}
MAX_STEPS = 4
#: A task that went back to In Progress this often is stuck; the cap also keeps the count inside SQLite's int64.
MAX_RETRY_COUNT = 1_000_000

JobStatus = Literal["running", "succeeded", "failed", "timed_out", "abandoned"]


class Task(BaseModel):
    id: str
    title: str
    description: str = ""
    assignee: str
    status: str
    steps: list[str] = Field(default_factory=list)
    current_step: int | None = None
    priority: str | None = None
    tags: list[str] = Field(default_factory=list)
    created_ms: int
    updated_ms: int
    retry_count: int = 0


class Note(BaseModel):
    id: int
    task_id: str
    author: str | None
    text: str
    created_ms: int


class HistoryEntry(BaseModel):
    task_id: str
    from_status: str | None
    to_status: str
    actor: str | None
    at_ms: int


class Job(BaseModel):
    id: str
    task_id: str | None
    argv: list[str]
    status: JobStatus
    exit_code: int | None = None
    started_ms: int
    ended_ms: int | None = None
    pid: int | None = None
    stdout: str = ""
    stderr: str = ""
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    truncated: bool = False
    reason: str | None = None
    actor: str | None = None
    already_running: bool = False


class TaskDetail(Task):
    notes: list[Note] = Field(default_factory=list)
    history: list[HistoryEntry] = Field(default_factory=list)
    jobs: list[Job] = Field(default_factory=list)


class Card(BaseModel):
    id: str
    title: str
    assignee: str
    updated_ms: int
    priority: str | None = None


class Column(BaseModel):
    status: str
    title: str
    cards: list[Card]


class Board(BaseModel):
    columns: list[Column]


class TaskPatch(BaseModel):
    """Fields to change; only the fields that are set are applied (status changes go through move)."""

    title: str | None = None
    description: str | None = None
    assignee: str | None = None
    steps: list[str] | None = None
    current_step: int | None = Field(default=None, ge=1, le=MAX_STEPS)
    priority: str | None = None
    tags: list[str] | None = None
    retry_count: int | None = Field(default=None, ge=0, le=MAX_RETRY_COUNT)


class ImportReport(BaseModel):
    created: int = 0
    updated: int = 0
    cards: int = 0
    skipped_columns: list[str] = Field(default_factory=list)


class ExportReport(BaseModel):
    board_path: str
    task_files: int
