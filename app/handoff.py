"""What needs both the board and the memory: a task handed to another agent, and the agents either knows.

The two domains never import each other, so this composes them from outside, as ``container`` does:
the board's text of the task (``kanban.texts``) and the memories its title recalls (``memory.texts``).
"""

from __future__ import annotations

from app.container import Services
from app.kanban.texts import render_task
from app.memory import listing
from app.memory.scopes import AGENT_PREFIX
from app.memory.texts import recall_text

HANDOFF_RECALL = 6


async def handoff_text(services: Services, task_id: str) -> str:
    """The task with its notes, history and jobs, then the memories its title recalls.

    Raises:
        InvalidTaskId, TaskNotFound: about ``task_id``.
    """
    task = await services.kanban.get_task(task_id)
    memories = await recall_text(services.memory, task.title, top_k=HANDOFF_RECALL)
    if task.status == "running":
        claim = "It is in progress: carry on from its notes and history."
    else:
        claim = (f"Claim it before you start: move_card({task.id!r}, 'running', expected_status={task.status!r}), "
                 "so that only one agent does.")
    return (
        f"You are taking over {task.id} on the shared board. Read what was done and noted so far. {claim} "
        "Store what you learn with remember.\n\n"
        + render_task(task)
        + "\n## What the shared memory holds about it\n"
        + memories
    )


async def agent_names(services: Services) -> list[str]:
    """Everyone the board names (assignees, step owners) and every agent with a memory scope, sorted."""
    people = set(await services.kanban.people())
    agents = {scope[len(AGENT_PREFIX):] for scope in await listing.scopes(services.memory.store)
              if scope.startswith(AGENT_PREFIX)}
    return sorted(people | agents, key=str.lower)
