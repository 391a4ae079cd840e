"""The kanban service: the one entry point REST, MCP and the CLI use for the board and its jobs."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from app.kanban import validation as check
from app.kanban.backend import BoardDatabase, open_database
from app.kanban.job_audit import FileAudit, JobAudit, TableAudit, audit_path
from app.kanban.job_command import JobCommand, load_job_command
from app.kanban.job_records import JobRecords
from app.kanban.jobs import JobRunner
from app.kanban.models import Board, Job, Note, Task, TaskDetail, TaskPatch
from app.kanban.store import TaskStore
from app.settings import Settings

logger = logging.getLogger(__name__)


class KanbanService:
    """Tasks on SQLite or PostgreSQL (every call in a worker thread) and the job runner."""

    def __init__(self, settings: Settings, db: BoardDatabase, command: JobCommand | None) -> None:
        self.settings = settings
        self._db = db
        self.tasks = TaskStore(db)
        self._records = JobRecords(db)
        # The trigger log: a table every instance shares with a PostgreSQL board, a JSONL file beside SQLite.
        self.audit: JobAudit = (TableAudit(db) if settings.kanban_db_url
                                else FileAudit(audit_path(settings.kanban_db_path)))
        self._runner = JobRunner(settings, self._records, command, self.audit)
        self._abandoned = 0

    @classmethod
    @asynccontextmanager
    async def open(cls, settings: Settings) -> AsyncIterator[KanbanService]:
        """Migrate the database, check the job command, clean up after a dead server; close on exit.

        Raises:
            UnsafeJobCommand: the configured job command is not safe to run.
            BoardUnavailable: the board's PostgreSQL database does not answer.
        """
        command = load_job_command(settings)
        db = open_database(settings)
        try:
            await asyncio.to_thread(db.migrate)
            service = cls(settings, db, command)
            try:
                service._abandoned = await service._runner.recover()
                yield service
            finally:
                await service._runner.close()
                await asyncio.to_thread(service.audit.close)
        finally:
            await asyncio.to_thread(db.close)

    def health(self) -> dict[str, Any]:
        return {
            "ready": True,
            "db_path": self._db.location,
            "job_command_configured": self._runner.command is not None,
            "jobs_running": self._runner.running_count,
            "jobs_abandoned_at_start": self._abandoned,
        }

    async def get_board(self) -> Board:
        return await asyncio.to_thread(self.tasks.board)

    async def get_task(self, task_id: str) -> TaskDetail:
        """Task with notes, history and jobs. Raises: InvalidTaskId, TaskNotFound."""
        canonical = check.normalize_task_id(task_id)
        task, notes, history = await asyncio.to_thread(self.tasks.detail, canonical)
        jobs = await asyncio.to_thread(self._records.find, canonical)
        return TaskDetail(**task.model_dump(), notes=notes, history=history, jobs=jobs)

    async def create_task(self, title: str, assignee: str, description: str | None = None, *,
                          task_id: str | None = None, steps: list[str] | None = None,
                          status: str | None = None, priority: str | None = None,
                          tags: list[str] | None = None, actor: str | None = None) -> Task:
        """New card (in ``todo`` unless a status is given). Raises: InvalidInput, TaskExists."""
        checked_steps = check.check_steps(steps)
        fields = {
            "title": check.check_title(title),
            "assignee": check.check_name(assignee, "assignee"),
            "description": check.check_description(description),
            "status": check.check_status(status) if status is not None else "todo",
            "steps": checked_steps,
            "current_step": check.check_current_step(None, checked_steps),
            "priority": check.check_priority(priority),
            "tags": check.check_tags(tags),
        }
        canonical = check.normalize_task_id(task_id) if task_id else None
        return await asyncio.to_thread(self.tasks.create, fields, task_id=canonical, actor=actor)

    async def move_card(self, task_id: str, to_status: str, *, expected_status: str | None = None,
                        actor: str | None = None) -> Task:
        """Move (or, with ``expected_status``, claim) a card. Raises: StatusConflict, TaskNotFound."""
        canonical = check.normalize_task_id(task_id)
        target = check.check_status(to_status)
        expected = check.check_status(expected_status) if expected_status is not None else None
        return await asyncio.to_thread(self.tasks.move, canonical, target, expected=expected, actor=actor)

    async def update_task(self, task_id: str, changes: TaskPatch, *, actor: str | None = None) -> Task:
        """Change the fields set in ``changes``. Raises: InvalidInput, TaskNotFound."""
        canonical = check.normalize_task_id(task_id)
        current = await asyncio.to_thread(self.tasks.get, canonical)
        values = self._checked_patch(changes, current)
        return await asyncio.to_thread(self.tasks.update, canonical, values)

    @staticmethod
    def _checked_patch(changes: TaskPatch, current: Task) -> dict[str, Any]:
        given = {name: getattr(changes, name) for name in changes.model_fields_set}
        values: dict[str, Any] = {}
        if given.get("title") is not None:
            values["title"] = check.check_title(given["title"])
        if given.get("assignee") is not None:
            values["assignee"] = check.check_name(given["assignee"], "assignee")
        if "description" in given:
            values["description"] = check.check_description(given["description"])
        if "priority" in given:
            values["priority"] = check.check_priority(given["priority"])
        if "tags" in given:
            values["tags"] = check.check_tags(given["tags"])
        if given.get("retry_count") is not None:
            values["retry_count"] = given["retry_count"]
        if "steps" in given or "current_step" in given:
            steps = check.check_steps(given["steps"]) if "steps" in given else current.steps
            kept = current.current_step if current.current_step and current.current_step <= len(steps) else None
            step = given.get("current_step", kept)
            values["steps"], values["current_step"] = steps, check.check_current_step(step, steps)
        return values

    async def delete_task(self, task_id: str) -> Task:
        """Delete a task with its notes and history (its jobs stay). Raises: InvalidTaskId, TaskNotFound."""
        return await asyncio.to_thread(self.tasks.delete, check.normalize_task_id(task_id))

    async def change_marker(self) -> int:
        """A number that changes whenever anyone, in any process, commits to the board's database."""
        return await asyncio.to_thread(self._db.change_marker)

    async def add_note(self, task_id: str, text: str, *, author: str | None = None) -> Note:
        """Append a note. Raises: InvalidInput, TaskNotFound."""
        canonical = check.normalize_task_id(task_id)
        who = None if author is None else (check.check_name(author, "author", allow_empty=True) or None)
        return await asyncio.to_thread(self.tasks.add_note, canonical, check.check_note(text), who)

    async def list_tasks(self, status: str | None = None, assignee: str | None = None) -> list[Task]:
        wanted = check.check_status(status) if status is not None else None
        return await asyncio.to_thread(self.tasks.find, wanted, assignee)

    async def list_tasks_by_status(self, status: str) -> list[Task]:
        return await self.list_tasks(status=status)

    async def page_tasks(self, before: str | None, limit: int) -> list[Task]:
        """Newest tasks first, those older than the task ``before``. Raises: InvalidTaskId."""
        before_seq = check.task_number(before) if before is not None else None
        return await asyncio.to_thread(self.tasks.page, before_seq, max(1, min(limit, 500)))

    async def task_ids_matching(self, prefix: str, limit: int = 100) -> tuple[list[str], int]:
        """Task ids for a partly typed one (``TASK-0001``, ``12``), newest first, and how many match."""
        return await asyncio.to_thread(self.tasks.ids_matching, prefix, limit)

    async def people(self) -> list[str]:
        """Everyone the board names: assignees and step owners."""
        return await asyncio.to_thread(self.tasks.people)

    async def trigger_job(self, task_id: str | None = None, args: list[str] | None = None,
                          wait_s: float | None = None, *, actor: str | None = None) -> Job:
        """Start the configured job (or return the running one with ``already_running``).

        Raises:
            JobNotConfigured, InvalidInput, TaskNotFound.
        """
        canonical = None
        if task_id is not None:
            canonical = check.normalize_task_id(task_id)
            await asyncio.to_thread(self.tasks.get, canonical)
        return await self._runner.trigger(canonical, args, wait_s, actor)

    async def get_job(self, job_id: str) -> Job:
        """Raises: JobNotFound."""
        return await asyncio.to_thread(self._records.get, job_id)

    async def list_jobs(self, task_id: str | None = None, limit: int = 50) -> list[Job]:
        canonical = check.normalize_task_id(task_id) if task_id is not None else None
        return await asyncio.to_thread(self._records.find, canonical, max(1, min(limit, 500)))
