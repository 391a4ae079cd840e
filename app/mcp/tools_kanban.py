"""The six kanban tools: thin closures over ``services.kanban`` (one service call each)."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, ToolAnnotations
from pydantic import BaseModel, Field

from app.container import Services
from app.kanban.models import STATUSES, Board, Job, Task, TaskDetail, TaskStatus
from app.mcp.caller import caller_agent, permitted
from app.mcp.results import run_tool

MAX_WAIT_S = 60.0
_STATUS_LIST = ", ".join(STATUSES)


class TaskList(BaseModel):
    tasks: list[Task]


TaskId = Annotated[
    str, Field(min_length=1, max_length=200, description="Task id such as TASK-00001 (TASK-00001-title works too).")
]
Status = Annotated[TaskStatus, Field(description="A board column.")]
Title = Annotated[str, Field(min_length=1, max_length=200, description="Short task title.")]
Assignee = Annotated[
    str, Field(min_length=1, max_length=64, description="Who does it: claude-code, antigravity, openclaw, a person.")
]
Description = Annotated[str | None, Field(description="Markdown description of the work and how to tell it is done.")]
NewTaskId = Annotated[str | None, Field(description="Explicit id; leave empty to get the next TASK-NNNNN.")]
Step = Annotated[str | None, Field(description="Assignee of this step of a multi-step relay (up to 4 steps).")]
OptionalStatus = Annotated[TaskStatus | None, Field(description="Starting column (default todo).")]
Priority = Annotated[str | None, Field(description="Priority label, e.g. low, medium, high.")]
TaskTags = Annotated[list[str] | None, Field(description="Labels for the card.")]
ExpectedStatus = Annotated[
    TaskStatus | None,
    Field(description="Claim atomically: move only if the card is still in this column, else a status_conflict error."),
]
JobTaskId = Annotated[str | None, Field(description="Task the job works on; passed to the job as an argument.")]
JobArgs = Annotated[list[str] | None, Field(description="Extra argv for the configured job command (no shell).")]
Wait = Annotated[
    float | None,
    Field(ge=0.0, le=MAX_WAIT_S, description=f"Seconds to wait for the result (0-{MAX_WAIT_S:g}); default 0."),
]

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)


def register(mcp: MCPServer, services: Services) -> None:
    """Add get_board, get_task, create_task, move_card, trigger_job and list_tasks_by_status to ``mcp``."""

    @mcp.tool(
        name="get_board",
        title="Show the kanban board",
        description=f"The whole board: every column in order ({_STATUS_LIST}) with its cards (id, title, assignee).",
        annotations=READ_ONLY,
    )
    async def get_board() -> Annotated[CallToolResult, Board]:
        return await run_tool("get_board", lambda: services.kanban.get_board())

    @mcp.tool(
        name="get_task",
        title="Read a task",
        description="One task in full: description, steps, notes, status history and its jobs.",
        annotations=READ_ONLY,
    )
    async def get_task(task_id: TaskId) -> Annotated[CallToolResult, TaskDetail]:
        return await run_tool("get_task", lambda: services.kanban.get_task(task_id))

    @mcp.tool(
        name="create_task",
        title="Create a task",
        description="Add a card to the board (in todo unless a status is given). Returns the task with its new id.",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False),
    )
    async def create_task(
        title: Title,
        assignee: Assignee,
        ctx: Context,
        description: Description = None,
        task_id: NewTaskId = None,
        step1: Step = None,
        step2: Step = None,
        step3: Step = None,
        step4: Step = None,
        status: OptionalStatus = None,
        priority: Priority = None,
        tags: TaskTags = None,
    ) -> Annotated[CallToolResult, Task]:
        steps = [step for step in (step1, step2, step3, step4) if step]
        actor = caller_agent(ctx)
        return await run_tool(
            "create_task",
            permitted(ctx, "board:write", lambda: services.kanban.create_task(
                title,
                assignee,
                description,
                task_id=task_id,
                steps=steps or None,
                status=status,
                priority=priority,
                tags=tags,
                actor=actor,
            )),
        )

    @mcp.tool(
        name="move_card",
        title="Move a card",
        description="Move a task to another column; the change is recorded in its history. Give expected_status "
        "to claim a card safely: of two agents moving todo→running at once, exactly one wins.",
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
        ),
    )
    async def move_card(
        task_id: TaskId, to_status: Status, ctx: Context, expected_status: ExpectedStatus = None
    ) -> Annotated[CallToolResult, Task]:
        actor = caller_agent(ctx)
        return await run_tool("move_card", permitted(
            ctx, "board:write",
            lambda: services.kanban.move_card(task_id, to_status, expected_status=expected_status, actor=actor),
        ))

    @mcp.tool(
        name="trigger_job",
        title="Start the job runner",
        description="Start the server's configured job command (optionally for one task) in the background and "
        "return its job record (id, status, ...) at once; with wait, return the result if it finishes in time. "
        "If a job is already running, that job is returned instead of starting another.",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=True),
    )
    async def trigger_job(
        ctx: Context, task_id: JobTaskId = None, args: JobArgs = None, wait: Wait = None
    ) -> Annotated[CallToolResult, Job]:
        actor = caller_agent(ctx)
        return await run_tool("trigger_job", permitted(
            ctx, "jobs:trigger", lambda: services.kanban.trigger_job(task_id, args, wait, actor=actor)
        ))

    @mcp.tool(
        name="list_tasks_by_status",
        title="List tasks in a column",
        description="Every task in one column, in full, with description, steps and tags.",
        annotations=READ_ONLY,
    )
    async def list_tasks_by_status(status: Status) -> Annotated[CallToolResult, TaskList]:
        async def call() -> TaskList:
            return TaskList(tasks=await services.kanban.list_tasks_by_status(status))

        return await run_tool("list_tasks_by_status", call)
