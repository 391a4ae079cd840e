"""``completion/complete``: the ids, statuses, agents and scopes that exist, for what a person is typing.

Prompt arguments (``handoff`` task_id, ``my-tasks`` agent, ``board`` status, ``recall`` scope) and the
resource templates' ids (``task://{task_id}``, ``memory://{memory_id}``) complete from the board and the
store as they are now. Anything else (a free-text argument such as ``query``, a prompt or template
this server does not have) completes to nothing rather than failing, as the specification allows.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp_types import CompleteRequestParams, CompleteResult, Completion, PromptReference

from app.container import Services
from app.errors import AppError
from app.handoff import agent_names
from app.kanban.models import STATUSES
from app.mcp.arguments import ToolServer
from app.mcp.protocol_errors import crashed, from_app_error
from app.mcp.resources import MEMORY_TEMPLATE, TASK_TEMPLATE
from app.memory import listing

MAX_VALUES = 100  # the specification's limit per response

Lookup = Callable[[Services, str], Awaitable[tuple[list[str], int]]]


def _starting(names: list[str], typed: str) -> tuple[list[str], int]:
    wanted = typed.strip().lower()
    found = [name for name in names if name.lower().startswith(wanted)]
    return found[:MAX_VALUES], len(found)


async def _task_ids(services: Services, typed: str) -> tuple[list[str], int]:
    return await services.kanban.task_ids_matching(typed, MAX_VALUES)


async def _memory_ids(services: Services, typed: str) -> tuple[list[str], int]:
    return await listing.ids_starting(services.memory.store, typed, MAX_VALUES)


async def _statuses(_: Services, typed: str) -> tuple[list[str], int]:
    return _starting(list(STATUSES), typed)


async def _agents(services: Services, typed: str) -> tuple[list[str], int]:
    return _starting(await agent_names(services), typed)


async def _scopes(services: Services, typed: str) -> tuple[list[str], int]:
    return _starting(await listing.scopes(services.memory.store), typed)


PROMPT_ARGUMENTS: dict[tuple[str, str], Lookup] = {
    ("handoff", "task_id"): _task_ids,
    ("my-tasks", "agent"): _agents,
    ("board", "status"): _statuses,
    ("recall", "scope"): _scopes,
}
TEMPLATE_ARGUMENTS: dict[tuple[str, str], Lookup] = {
    (TASK_TEMPLATE, "task_id"): _task_ids,
    (MEMORY_TEMPLATE, "memory_id"): _memory_ids,
}


def register(server: ToolServer, services: Services) -> None:
    """Serve ``completion/complete`` (and so advertise the completions capability)."""

    async def complete(_: ServerRequestContext[Any], params: CompleteRequestParams) -> CompleteResult:
        ref, argument = params.ref, params.argument
        table = PROMPT_ARGUMENTS if isinstance(ref, PromptReference) else TEMPLATE_ARGUMENTS
        key = ref.name if isinstance(ref, PromptReference) else ref.uri
        lookup = table.get((key, argument.name))
        if lookup is None:
            return CompleteResult(completion=Completion(values=[], total=0, has_more=False))
        try:
            values, total = await lookup(services, argument.value[:200])
        except AppError as exc:
            raise from_app_error(exc) from exc
        except Exception as exc:
            raise crashed(f"completion of {argument.name}") from exc
        return CompleteResult(completion=Completion(values=values, total=total, has_more=total > len(values)))

    server.protocol.add_request_handler("completion/complete", CompleteRequestParams, complete)
