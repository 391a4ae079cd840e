"""Kanban REST routes under ``/api/kanban``: thin, one service call each, errors as ``{detail, code}``."""

from __future__ import annotations

from fastapi import APIRouter, Request, status
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from app.kanban.models import Board, Job, Note, Task, TaskDetail, TaskPatch
from app.rest.deps import KanbanServiceDep

router = APIRouter(prefix="/api/kanban", tags=["kanban"])


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CreateTaskBody(_Body):
    title: str
    assignee: str
    description: str | None = None
    task_id: str | None = None
    steps: list[str] | None = Field(default=None, max_length=4)
    status: str | None = None
    priority: str | None = None
    tags: list[str] | None = None
    actor: str | None = None


class PatchTaskBody(TaskPatch):
    model_config = ConfigDict(extra="forbid")
    actor: str | None = None


class MoveBody(_Body):
    to_status: str
    expected_status: str | None = None
    actor: str | None = None


class NoteBody(_Body):
    text: str
    author: str | None = None


class JobBody(_Body):
    task_id: str | None = None
    args: list[str] | None = Field(default=None, max_length=64)
    wait_s: float | None = Field(default=None, ge=0, le=60)


def _actor(request: Request, given: str | None) -> str | None:
    """The agent bound to the caller's token wins over a name the body claims."""
    return getattr(request.state, "agent", None) or given


@router.get("/board")
async def get_board(kanban: KanbanServiceDep) -> Board:
    return await kanban.get_board()


@router.get("/tasks")
async def list_tasks(kanban: KanbanServiceDep, status: str | None = None, assignee: str | None = None) -> list[Task]:
    return await kanban.list_tasks(status=status, assignee=assignee)


@router.post("/tasks", status_code=status.HTTP_201_CREATED)
async def create_task(body: CreateTaskBody, request: Request, kanban: KanbanServiceDep) -> Task:
    return await kanban.create_task(
        body.title, body.assignee, body.description, task_id=body.task_id, steps=body.steps, status=body.status,
        priority=body.priority, tags=body.tags, actor=_actor(request, body.actor),
    )


@router.get("/tasks/{task_id}")
async def get_task(task_id: str, kanban: KanbanServiceDep) -> TaskDetail:
    return await kanban.get_task(task_id)


@router.patch("/tasks/{task_id}")
async def update_task(task_id: str, body: PatchTaskBody, request: Request, kanban: KanbanServiceDep) -> Task:
    changes = TaskPatch(**body.model_dump(include=body.model_fields_set - {"actor"}))
    return await kanban.update_task(task_id, changes, actor=_actor(request, body.actor))


@router.delete("/tasks/{task_id}")
async def delete_task(task_id: str, kanban: KanbanServiceDep) -> Task:
    """Delete the task with its notes and history; answers with the task as it was."""
    return await kanban.delete_task(task_id)


@router.post("/tasks/{task_id}/move")
async def move_card(task_id: str, body: MoveBody, request: Request, kanban: KanbanServiceDep) -> Task:
    return await kanban.move_card(
        task_id, body.to_status, expected_status=body.expected_status, actor=_actor(request, body.actor)
    )


@router.post("/tasks/{task_id}/notes", status_code=status.HTTP_201_CREATED)
async def add_note(task_id: str, body: NoteBody, request: Request, kanban: KanbanServiceDep) -> Note:
    return await kanban.add_note(task_id, body.text, author=_actor(request, body.author))


@router.post("/jobs", response_model=Job, responses={202: {"model": Job, "description": "still running"}})
async def trigger_job(body: JobBody, request: Request, kanban: KanbanServiceDep) -> JSONResponse:
    job = await kanban.trigger_job(body.task_id, body.args, body.wait_s, actor=_actor(request, None))
    code = status.HTTP_202_ACCEPTED if job.status == "running" else status.HTTP_200_OK
    return JSONResponse(job.model_dump(mode="json"), status_code=code)


@router.get("/jobs")
async def list_jobs(kanban: KanbanServiceDep, task_id: str | None = None, limit: int = 50) -> list[Job]:
    return await kanban.list_jobs(task_id=task_id, limit=limit)


@router.get("/jobs/{job_id}")
async def get_job(job_id: str, kanban: KanbanServiceDep) -> Job:
    return await kanban.get_job(job_id)
