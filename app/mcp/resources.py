"""MCP resources: the board, each task and each memory, as text an agent attaches to a prompt.

- ``board://current``: the open cards by column and assignee; ``task://TASK-00012``: one card with its
  description, notes, history and jobs; ``memory://<id>``: one memory, spotlighted as data.
- ``resources/list`` pages (``PAGE_SIZE`` a page): the board, the tasks newest first, then the memories
  newest first. The cursor is a key, not an offset, so writes between two pages neither shift nor repeat.
- ``resources/templates/list`` names ``task://{task_id}`` and ``memory://{memory_id}``; ``completion``
  completes their ids.

Reading follows the tools: any caller the edge lets in may read every task and every memory (as
``get_task`` and ``recall`` do); nothing here writes. The texts come from the services.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any, Literal

from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import (
    ListResourcesResult,
    ListResourceTemplatesResult,
    PaginatedRequestParams,
    ReadResourceRequestParams,
    ReadResourceResult,
    Resource,
    ResourceTemplate,
    TextResourceContents,
)

from app.container import Services
from app.errors import AppError, NotFound
from app.kanban import texts as board_texts
from app.kanban.models import Task
from app.kanban.validation import normalize_task_id
from app.mcp.arguments import ToolServer
from app.mcp.protocol_errors import crashed, from_app_error, invalid
from app.memory import listing
from app.memory.models import Memory
from app.memory.texts import memory_text, memory_title
from app.memory.validation import check_memory_id

BOARD_URI = "board://current"
TASK_TEMPLATE = "task://{task_id}"
MEMORY_TEMPLATE = "memory://{memory_id}"
MIME = "text/markdown"
PAGE_SIZE = 100

Kind = Literal["board", "task", "memory"]


class UnknownResource(NotFound):
    code = "resource_not_found"


@dataclass(frozen=True)
class Target:
    """What a URI of ours names: the board, or a task or memory by id."""

    kind: Kind
    key: str = ""


def parse(uri: str) -> Target | None:
    """The resource ``uri`` names, None when it is not one of ours.

    Raises:
        InvalidTaskId, InvalidInput: a ``task://`` or ``memory://`` URI with a malformed id.
    """
    if uri == BOARD_URI:
        return Target("board")
    scheme, sep, rest = uri.partition("://")
    if not sep:
        return None
    if scheme == "task":
        return Target("task", normalize_task_id(rest))
    if scheme == "memory":
        return Target("memory", check_memory_id(rest))
    return None


async def read_text(services: Services, target: Target) -> str:
    """The text of a resource. Raises: TaskNotFound, MemoryNotFound, Unavailable."""
    if target.kind == "board":
        return await board_texts.board_text(services.kanban)
    if target.kind == "task":
        return await board_texts.task_text(services.kanban, target.key)
    return memory_text(await services.memory.get(target.key))


def task_resource(task: Task) -> Resource:
    return Resource(uri=f"task://{task.id}", name=task.id, title=f"{task.id} {task.title}",
                    description=f"{task.status}, {board_texts.owner(task)}: the card with its notes and history",
                    mime_type=MIME)


def memory_resource(memory: Memory) -> Resource:
    tags = f", tagged {', '.join(memory.tags)}" if memory.tags else ""
    return Resource(uri=f"memory://{memory.id}", name=f"memory-{memory.id[:8]}", title=memory_title(memory),
                    description=f"a memory in {memory.scope}{tags}", mime_type="text/plain")


BOARD = Resource(uri=BOARD_URI, name="board", title="The board",
                 description="The open cards of the shared board, by column and assignee", mime_type=MIME)
TEMPLATES = [
    ResourceTemplate(uri_template=TASK_TEMPLATE, name="task", title="A task",
                     description="One card of the board with its description, notes, status history and jobs; "
                     "the id completes (TASK-00012, or 12)", mime_type=MIME),
    ResourceTemplate(uri_template=MEMORY_TEMPLATE, name="memory", title="A memory",
                     description="One shared memory in full, with its scope, tags and author; the id completes",
                     mime_type="text/plain"),
]


# --- the cursor: which list and after what -----------------------------------------------------

def encode_cursor(state: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(state, separators=(",", ":")).encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> dict[str, Any] | None:
    """Raises: MCPError (invalid params): a cursor this server did not hand out."""
    if cursor is None:
        return None
    try:
        state = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        state = None
    if not isinstance(state, dict) or state.get("k") not in ("t", "m"):
        raise invalid("invalid_cursor", "pass back the nextCursor of the previous page, or none for the first")
    return state


async def list_page(services: Services, cursor: str | None) -> ListResourcesResult:
    """One page: the board and tasks first, then memories; ``next_cursor`` None on the last page."""
    state = decode_cursor(cursor)
    resources = [BOARD] if state is None else []
    if state is None or state["k"] == "t":
        before = state.get("b") if state else None
        tasks = await services.kanban.page_tasks(before if isinstance(before, str) else None,
                                                 PAGE_SIZE - len(resources) + 1)
        room = PAGE_SIZE - len(resources)
        resources += [task_resource(task) for task in tasks[:room]]
        if len(tasks) > room:
            next_cursor = encode_cursor({"k": "t", "b": tasks[room - 1].id})
            return ListResourcesResult(resources=resources, next_cursor=next_cursor)
        state = {"k": "m"}
    room = PAGE_SIZE - len(resources)
    if room == 0:
        return ListResourcesResult(resources=resources, next_cursor=encode_cursor(state))
    key = state.get("a")
    after = (int(key[0]), str(key[1])) if isinstance(key, list) and len(key) == 2 else None
    memories, next_key = await listing.page_after(services.memory.store, after, room)
    resources += [memory_resource(memory) for memory in memories]
    next_cursor = encode_cursor({"k": "m", "a": list(next_key)}) if next_key is not None else None
    return ListResourcesResult(resources=resources, next_cursor=next_cursor)


def register(server: ToolServer, services: Services) -> None:
    """Serve ``resources/list`` (paged), ``resources/templates/list`` and ``resources/read``."""

    async def list_resources(_: ServerRequestContext[Any], params: PaginatedRequestParams) -> ListResourcesResult:
        try:
            return await list_page(services, params.cursor)
        except AppError as exc:
            raise from_app_error(exc) from exc
        except MCPError:
            raise
        except Exception as exc:
            raise crashed("resources/list") from exc

    async def list_templates(_: ServerRequestContext[Any], __: PaginatedRequestParams) -> ListResourceTemplatesResult:
        return ListResourceTemplatesResult(resource_templates=TEMPLATES)

    async def read(_: ServerRequestContext[Any], params: ReadResourceRequestParams) -> ReadResourceResult:
        try:
            target = parse(params.uri)
            if target is None:
                raise UnknownResource(f"no resource {params.uri[:200]!r}: this server serves {BOARD_URI}, "
                                      "task://TASK-NNNNN and memory://<id>")
            text = await read_text(services, target)
        except AppError as exc:
            raise from_app_error(exc, uri=params.uri) from exc
        except Exception as exc:
            raise crashed(f"resources/read {params.uri[:80]!r}") from exc
        mime = "text/plain" if target.kind == "memory" else MIME
        return ReadResourceResult(contents=[TextResourceContents(uri=params.uri, text=text, mime_type=mime)])

    server.protocol.add_request_handler("resources/list", PaginatedRequestParams, list_resources)
    server.protocol.add_request_handler("resources/templates/list", PaginatedRequestParams, list_templates)
    server.protocol.add_request_handler("resources/read", ReadResourceRequestParams, read)

