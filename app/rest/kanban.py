"""Kanban REST routes under ``/api/kanban``: thin, one service call each, errors as ``{detail, code}``.

Bodies are strict (a ``true`` is not a number) and every number is bounded. String fields carry the
pattern of the domain check behind them (``app.rest.patterns``), so the schema says what is accepted;
lengths are checked here on the raw value, which is what the schema's ``maxLength`` counts.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, status
from fastapi.responses import JSONResponse
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from app.kanban.job_command import MAX_ARG_CHARS, MAX_ARGS
from app.kanban.jobs import MAX_WAIT_S
from app.kanban.models import MAX_RETRY_COUNT, MAX_STEPS, Board, Job, Note, Task, TaskDetail, TaskPatch, TaskStatus
from app.kanban.validation import (
    MAX_DESCRIPTION_CHARS,
    MAX_NAME_CHARS,
    MAX_NOTE_CHARS,
    MAX_TAG_CHARS,
    MAX_TAGS,
    MAX_TITLE_CHARS,
)
from app.rest import patterns
from app.rest.deps import KanbanServiceDep, MayTriggerJobs, MayWriteBoard
from app.rest.schema import errors

router = APIRouter(prefix="/api/kanban", tags=["kanban"])

#: Most jobs one list returns (the service clamps to this too).
MAX_JOBS_LISTED = 500
#: Longest task id taken in a query string or path: TASK-000000001 and a title's worth of suffix.
MAX_TASK_ID_CHARS = 400


def _integral(value: object) -> object:
    """JSON Schema counts 3.0 as an integer; strict validation alone would refuse it (and still refuses 3.5)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


# The bounds go before the validator: after it, pydantic would print them as "ge"/"le", not minimum/maximum.
StepNumber = Annotated[int, Field(ge=1, le=MAX_STEPS), BeforeValidator(_integral)]
RetryCount = Annotated[int, Field(ge=0, le=MAX_RETRY_COUNT), BeforeValidator(_integral)]


def _pattern(pattern: str) -> dict[str, str]:
    # Documented, not enforced here: the domain check enforces it with its own code and message.
    return {"pattern": pattern}


Title = Annotated[str, Field(max_length=MAX_TITLE_CHARS, json_schema_extra=_pattern(patterns.TITLE_PATTERN))]
Name = Annotated[str, Field(max_length=MAX_NAME_CHARS, json_schema_extra=_pattern(patterns.NAME_PATTERN))]
OptionalName = Annotated[
    str, Field(max_length=MAX_NAME_CHARS, json_schema_extra=_pattern(patterns.OPTIONAL_NAME_PATTERN))
]
Actor = Annotated[str, Field(max_length=MAX_NAME_CHARS, description="Who acts; a token's agent name wins.")]
Description = Annotated[
    str, Field(max_length=MAX_DESCRIPTION_CHARS, json_schema_extra=_pattern(patterns.NO_NUL_PATTERN))
]
_TASK_ID_HELP = "TASK-00001 or TASK-00001-<title>"
TaskIdField = Annotated[str, Field(description=_TASK_ID_HELP, json_schema_extra=_pattern(patterns.TASK_ID_PATTERN))]
NewTaskId = Annotated[
    str,
    Field(description=f"{_TASK_ID_HELP}; empty or absent: the next id",
          json_schema_extra=_pattern(patterns.NEW_TASK_ID_PATTERN)),
]
TaskIdPath = Annotated[
    str,
    Path(max_length=MAX_TASK_ID_CHARS, description=_TASK_ID_HELP,
         json_schema_extra=_pattern(patterns.TASK_ID_PATH_PATTERN)),
]
CardTag = Annotated[str, Field(max_length=MAX_TAG_CHARS, json_schema_extra=_pattern(patterns.CARD_TAG_PATTERN))]
JobArg = Annotated[str, Field(max_length=MAX_ARG_CHARS, pattern=patterns.NO_NUL_PATTERN)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class CreateTaskBody(_Body):
    title: Title
    assignee: Name
    description: Description | None = None
    task_id: NewTaskId | None = None
    steps: list[Name] | None = Field(default=None, max_length=MAX_STEPS)
    status: TaskStatus | None = None
    priority: OptionalName | None = None
    tags: list[CardTag] | None = Field(default=None, max_length=MAX_TAGS)
    actor: Actor | None = None


class PatchTaskBody(_Body):
    """Fields to change; only those sent are applied (status changes go through move)."""

    title: Title | None = None
    description: Description | None = None
    assignee: Name | None = None
    steps: list[Name] | None = Field(default=None, max_length=MAX_STEPS)
    current_step: StepNumber | None = Field(
        default=None, description="1-based; must be one of the task's steps (else 409)."
    )
    priority: OptionalName | None = None
    tags: list[CardTag] | None = Field(default=None, max_length=MAX_TAGS)
    retry_count: RetryCount | None = None
    actor: Actor | None = None


class MoveBody(_Body):
    to_status: TaskStatus
    expected_status: TaskStatus | None = Field(
        default=None, description="Claim: move only if the card is still in this column, else 409 status_conflict."
    )
    actor: Actor | None = None


class NoteBody(_Body):
    text: Annotated[str, Field(max_length=MAX_NOTE_CHARS, json_schema_extra=_pattern(patterns.NOTE_PATTERN))]
    author: OptionalName | None = None


class JobBody(_Body):
    task_id: TaskIdField | None = None
    args: list[JobArg] | None = Field(default=None, max_length=MAX_ARGS)
    wait_s: float | None = Field(default=None, ge=0, le=MAX_WAIT_S, allow_inf_nan=False)


def _actor(request: Request, given: str | None) -> str | None:
    """The agent bound to the caller's token wins over a name the body claims."""
    return getattr(request.state, "agent", None) or given


@router.get("/board")
async def get_board(kanban: KanbanServiceDep) -> Board:
    return await kanban.get_board()


@router.get("/tasks", responses=errors(422))
async def list_tasks(kanban: KanbanServiceDep, status: TaskStatus | None = None,
                     assignee: Annotated[str | None, Query(max_length=MAX_NAME_CHARS)] = None) -> list[Task]:
    return await kanban.list_tasks(status=status, assignee=assignee)


@router.post("/tasks", status_code=status.HTTP_201_CREATED, responses=errors(403, 409, 422),
             dependencies=[MayWriteBoard])
async def create_task(body: CreateTaskBody, request: Request, kanban: KanbanServiceDep) -> Task:
    return await kanban.create_task(
        body.title, body.assignee, body.description, task_id=body.task_id, steps=body.steps, status=body.status,
        priority=body.priority, tags=body.tags, actor=_actor(request, body.actor),
    )


@router.get("/tasks/{task_id}", responses=errors(404, 422))
async def get_task(task_id: TaskIdPath, kanban: KanbanServiceDep) -> TaskDetail:
    return await kanban.get_task(task_id)


@router.patch("/tasks/{task_id}", responses=errors(403, 404, 409, 422), dependencies=[MayWriteBoard])
async def update_task(task_id: TaskIdPath, body: PatchTaskBody, request: Request, kanban: KanbanServiceDep) -> Task:
    changes = TaskPatch(**body.model_dump(include=body.model_fields_set - {"actor"}))
    return await kanban.update_task(task_id, changes, actor=_actor(request, body.actor))


@router.delete("/tasks/{task_id}", responses=errors(403, 404, 422), dependencies=[MayWriteBoard])
async def delete_task(task_id: TaskIdPath, kanban: KanbanServiceDep) -> Task:
    """Delete the task with its notes and history; answers with the task as it was."""
    return await kanban.delete_task(task_id)


@router.post("/tasks/{task_id}/move", responses=errors(403, 404, 409, 422), dependencies=[MayWriteBoard])
async def move_card(task_id: TaskIdPath, body: MoveBody, request: Request, kanban: KanbanServiceDep) -> Task:
    return await kanban.move_card(
        task_id, body.to_status, expected_status=body.expected_status, actor=_actor(request, body.actor)
    )


@router.post("/tasks/{task_id}/notes", status_code=status.HTTP_201_CREATED, responses=errors(403, 404, 422),
             dependencies=[MayWriteBoard])
async def add_note(task_id: TaskIdPath, body: NoteBody, request: Request, kanban: KanbanServiceDep) -> Note:
    return await kanban.add_note(task_id, body.text, author=_actor(request, body.author))


@router.post(
    "/jobs",
    response_model=Job,
    responses={202: {"model": Job, "description": "still running"}, **errors(403, 404, 422, 503)},
    dependencies=[MayTriggerJobs],
)
async def trigger_job(body: JobBody, request: Request, kanban: KanbanServiceDep) -> JSONResponse:
    job = await kanban.trigger_job(body.task_id, body.args, body.wait_s, actor=_actor(request, None))
    code = status.HTTP_202_ACCEPTED if job.status == "running" else status.HTTP_200_OK
    return JSONResponse(job.model_dump(mode="json"), status_code=code)


@router.get("/jobs", responses=errors(422))
async def list_jobs(kanban: KanbanServiceDep,
                    task_id: Annotated[str | None, Query(max_length=MAX_TASK_ID_CHARS,
                                                         json_schema_extra=_pattern(patterns.TASK_ID_PATTERN))] = None,
                    limit: Annotated[int, Query(ge=1, le=MAX_JOBS_LISTED)] = 50) -> list[Job]:
    return await kanban.list_jobs(task_id=task_id, limit=limit)


@router.get("/jobs/{job_id}", responses=errors(404))
async def get_job(job_id: str, kanban: KanbanServiceDep) -> Job:
    return await kanban.get_job(job_id)
