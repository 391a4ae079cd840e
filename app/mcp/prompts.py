"""MCP prompts: what a person picks from the client's slash menu (Claude Code: ``/mcp__memory-mcp__board``).

Each prompt is one service call that returns a text (``memory.texts``, ``kanban.texts``, ``handoff``);
this module only declares the prompts and wraps the text in one user message. Arguments are checked
as tool arguments are: an unknown prompt or argument, or a missing one, is a -32602 error reading
``invalid_input: <argument>: <problem>``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp_types import (
    GetPromptRequestParams,
    GetPromptResult,
    ListPromptsResult,
    PaginatedRequestParams,
    Prompt,
    PromptArgument,
    PromptMessage,
    TextContent,
)

from app.container import Services
from app.errors import AppError
from app.handoff import handoff_text
from app.kanban.models import STATUSES
from app.kanban.texts import board_text, next_text
from app.mcp.arguments import MAX_NAME_CHARS, ToolServer
from app.mcp.protocol_errors import crashed, from_app_error, invalid
from app.memory.texts import recall_text

MAX_ARGUMENT_CHARS = 2000

Render = Callable[[Services, dict[str, str]], Awaitable[str]]


@dataclass(frozen=True)
class Definition:
    prompt: Prompt
    render: Render

    @property
    def required(self) -> list[str]:
        return [a.name for a in self.prompt.arguments or [] if a.required]

    @property
    def known(self) -> set[str]:
        return {a.name for a in self.prompt.arguments or []}


def _argument(name: str, description: str, *, required: bool) -> PromptArgument:
    return PromptArgument(name=name, description=description, required=required)


async def _recall(services: Services, args: dict[str, str]) -> str:
    return await recall_text(services.memory, args["query"], scope=args.get("scope") or None)


async def _board(services: Services, args: dict[str, str]) -> str:
    return await board_text(services.kanban, args.get("status") or None)


async def _my_tasks(services: Services, args: dict[str, str]) -> str:
    return await next_text(services.kanban, args["agent"])


async def _handoff(services: Services, args: dict[str, str]) -> str:
    return await handoff_text(services, args["task_id"])


PROMPTS: dict[str, Definition] = {
    d.prompt.name: d
    for d in [
        Definition(Prompt(
            name="recall", title="Recall shared memories",
            description="What the agents' shared memory holds about a question, best match first, as a block of "
            "notes marked as data (the same block the Claude Code hook adds).",
            arguments=[
                _argument("query", "What to look for, in your own words (any language)", required=True),
                _argument("scope", "Only this scope: global, agent:<name>, project:<name>, … (completes)",
                          required=False),
            ]), _recall),
        Definition(Prompt(
            name="board", title="Show the board",
            description="The open cards of the shared board, by column and then by assignee; "
            "with a status, that one column.",
            arguments=[_argument("status", f"Only this column: {', '.join(STATUSES)}", required=False)]), _board),
        Definition(Prompt(
            name="my-tasks", title="What should I do next",
            description="An agent's cards: in progress first, then todo by priority, then review, blocked "
            "and waiting, with how to claim the next one.",
            arguments=[_argument("agent", "The agent or person, as the board names assignees "
                                          "(claude-code, antigravity, …; completes)", required=True)]), _my_tasks),
        Definition(Prompt(
            name="handoff", title="Take over a task",
            description="A task with its description, notes, status history and jobs, and what the shared "
            "memory holds about it: all an agent needs to pick up where another left off.",
            arguments=[_argument("task_id", "The task, e.g. TASK-00012 (completes)", required=True)]), _handoff),
    ]
}


def checked_arguments(definition: Definition, arguments: dict[str, str] | None) -> dict[str, str]:
    """The arguments, trimmed; refused as -32602 ``invalid_input`` when unknown, missing or too long."""
    given = {name: value.strip() for name, value in (arguments or {}).items()}
    problems = [f"{name[:MAX_NAME_CHARS]}: unknown argument" for name in given if name not in definition.known]
    problems += [f"{name}: required" for name in definition.required if not given.get(name)]
    problems += [f"{name}: at most {MAX_ARGUMENT_CHARS} characters" for name, value in given.items()
                 if name in definition.known and len(value) > MAX_ARGUMENT_CHARS]
    if problems:
        raise invalid("invalid_input", "; ".join(problems))
    return given


def register(server: ToolServer, services: Services) -> None:
    """Serve ``prompts/list`` and ``prompts/get`` for the four prompts."""

    async def list_prompts(_: ServerRequestContext[Any], __: PaginatedRequestParams) -> ListPromptsResult:
        return ListPromptsResult(prompts=[d.prompt for d in PROMPTS.values()])

    async def get_prompt(_: ServerRequestContext[Any], params: GetPromptRequestParams) -> GetPromptResult:
        definition = PROMPTS.get(params.name)
        if definition is None:
            raise invalid("unknown_prompt", f"there is no prompt named {params.name[:MAX_NAME_CHARS]!r}; "
                          f"prompts/list names them ({', '.join(PROMPTS)})")
        arguments = checked_arguments(definition, params.arguments)
        try:
            text = await definition.render(services, arguments)
        except AppError as exc:
            raise from_app_error(exc) from exc
        except Exception as exc:
            raise crashed(f"prompt {params.name}") from exc
        message = PromptMessage(role="user", content=TextContent(type="text", text=text))
        return GetPromptResult(description=definition.prompt.description, messages=[message])

    server.protocol.add_request_handler("prompts/list", PaginatedRequestParams, list_prompts)
    server.protocol.add_request_handler("prompts/get", GetPromptRequestParams, get_prompt)
