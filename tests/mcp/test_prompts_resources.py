"""Prompts, resources and completion through the official Python client, on a real LanceDB and SQLite board."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, PromptReference, ResourceTemplateReference

from app.container import Services
from app.kanban.service import KanbanService
from app.mcp.front_end import build_server
from app.mcp.resources import PAGE_SIZE
from app.memory.recall_block import PREAMBLE
from app.memory.service import MemoryService
from app.settings import Settings

RESOURCE_NOT_FOUND = -32002


@pytest.fixture
async def services(settings: Settings) -> AsyncIterator[Services]:
    async with MemoryService.open(settings) as memory, KanbanService.open(settings) as kanban:
        yield Services(_memory=memory, _kanban=kanban)


@pytest.fixture
async def client(services: Services) -> AsyncIterator[Client]:
    async with Client(build_server(services), mode="legacy", cache=None) as connected:
        yield connected


async def prompt_text(client: Client, name: str, arguments: dict[str, str] | None = None) -> str:
    result = await client.get_prompt(name, arguments or {})
    assert [message.role for message in result.messages] == ["user"]
    return result.messages[0].content.text  # type: ignore[union-attr]


async def refused(call: object, code: int, starts: str) -> str:
    with pytest.raises(MCPError) as caught:
        await call  # type: ignore[misc]
    assert caught.value.code == code, caught.value
    assert caught.value.message.startswith(starts), caught.value.message
    return caught.value.message


# --- prompts ---------------------------------------------------------------------------------------


async def test_the_four_prompts_are_listed_with_typed_arguments_a_person_understands(client: Client) -> None:
    prompts = {prompt.name: prompt for prompt in (await client.list_prompts()).prompts}
    assert set(prompts) == {"recall", "board", "my-tasks", "handoff"}
    required = {name: {a.name: a.required for a in p.arguments or []} for name, p in prompts.items()}
    assert required == {"recall": {"query": True, "scope": False}, "board": {"status": False},
                        "my-tasks": {"agent": True}, "handoff": {"task_id": True}}
    for prompt in prompts.values():
        assert prompt.title and len(prompt.description or "") >= 40
        assert all(argument.description for argument in prompt.arguments or [])


async def test_recall_gives_the_hooks_block_with_the_text_escaped(client: Client, services: Services) -> None:
    stored = await services.memory.remember("Deploys go through <staging> first & never on Fridays", ["deploy"])
    text = await prompt_text(client, "recall", {"query": "Deploys go through staging first"})
    assert text.startswith("<memory_recall>\n" + PREAMBLE)
    assert f'<memory id="{stored.memory_id}"' in text
    assert "Deploys go through &lt;staging&gt; first &amp; never on Fridays" in text
    assert await prompt_text(client, "recall", {"query": "anything", "scope": "project:empty"}) == (
        "memory-mcp holds no memory in scope project:empty that matches this query.\n")


async def test_board_groups_open_cards_by_status_then_assignee(client: Client, services: Services) -> None:
    kanban = services.kanban
    first = await kanban.create_task("Write the parser", "claude-code", priority="high")
    second = await kanban.create_task("Review the parser", "antigravity")
    done = await kanban.create_task("Old chore", "claude-code", status="done")
    await kanban.move_card(first.id, "running")
    text = await prompt_text(client, "board")
    assert text.index("## Todo (1)") < text.index("## In Progress (1)")
    assert f"- antigravity\n  - {second.id} Review the parser" in text
    assert f"- claude-code\n  - {first.id} Write the parser [high]" in text
    assert done.id not in text and "Not shown: Done 1." in text
    assert done.id in await prompt_text(client, "board", {"status": "done"})
    await refused(client.get_prompt("board", {"status": "later"}), INVALID_PARAMS, "invalid_status: ")


async def test_my_tasks_puts_running_work_first_then_todo_by_priority(client: Client, services: Services) -> None:
    kanban = services.kanban
    low = await kanban.create_task("Tidy the docs", "claude-code", priority="low")
    urgent = await kanban.create_task("Fix the outage", "claude-code", priority="urgent")
    running = await kanban.create_task("Half-done refactor", "claude-code")
    await kanban.move_card(running.id, "running")
    relay = await kanban.create_task("Relay step two", "antigravity", steps=["claude-code", "antigravity"])
    await kanban.create_task("Not mine", "antigravity")
    text = await prompt_text(client, "my-tasks", {"agent": "claude-code"})
    order = [text.index(task_id) for task_id in (running.id, urgent.id, low.id)]
    assert order == sorted(order)
    assert relay.id in text  # its current step is claude-code's
    assert "Not mine" not in text
    assert 'move_card(task_id, "running", expected_status="todo")' in text
    nobody = await prompt_text(client, "my-tasks", {"agent": "openclaw"})
    assert nobody.startswith("# Next for openclaw\nNothing open on the board is openclaw's.")


async def test_handoff_has_the_task_its_notes_history_and_the_memories_its_title_recalls(
        client: Client, services: Services) -> None:
    memory = await services.memory.remember("The flaky login test needs the clock frozen", ["testing"])
    task = await services.kanban.create_task("Fix the flaky login test", "claude-code", "It fails once a day")
    await services.kanban.add_note(task.id, "only on CI, never locally", author="antigravity")
    await services.kanban.move_card(task.id, "review", actor="claude-code")
    text = await prompt_text(client, "handoff", {"task_id": task.id})
    assert text.startswith(f"You are taking over {task.id}")
    assert "expected_status='review'" in text
    assert "It fails once a day" in text
    assert "antigravity: only on CI, never locally" in text
    assert "todo → review by claude-code" in text
    assert f'<memory id="{memory.memory_id}"' in text.split("## What the shared memory holds about it")[1]


async def test_prompt_mistakes_are_invalid_params_with_a_readable_code(client: Client) -> None:
    await refused(client.get_prompt("boards", {}), INVALID_PARAMS, "unknown_prompt: there is no prompt named 'boards'")
    await refused(client.get_prompt("handoff", {}), INVALID_PARAMS, "invalid_input: task_id: required")
    await refused(client.get_prompt("my-tasks", {"agent": "x", "team": "y"}), INVALID_PARAMS,
                  "invalid_input: team: unknown argument")
    await refused(client.get_prompt("handoff", {"task_id": "TASK-99999"}), INVALID_PARAMS, "task_not_found: ")
    await refused(client.get_prompt("handoff", {"task_id": "../etc"}), INVALID_PARAMS, "invalid_task_id: ")


# --- resources -------------------------------------------------------------------------------------


async def test_resources_are_the_board_then_tasks_then_memories_newest_first(client: Client,
                                                                            services: Services) -> None:
    old = await services.kanban.create_task("Older task", "claude-code")
    new = await services.kanban.create_task("Newer task", "claude-code")
    first = await services.memory.remember("first memory of the list")
    second = await services.memory.remember("second memory of the list")
    listed = await client.list_resources()
    uris = [resource.uri for resource in listed.resources]
    assert uris[:3] == ["board://current", f"task://{new.id}", f"task://{old.id}"]
    assert set(uris[3:]) == {f"memory://{first.memory_id}", f"memory://{second.memory_id}"}
    assert listed.next_cursor is None
    titles = {resource.uri: resource.title for resource in listed.resources}
    assert titles[f"task://{new.id}"] == f"{new.id} Newer task"
    assert titles[f"memory://{first.memory_id}"] == "first memory of the list"
    templates = (await client.list_resource_templates()).resource_templates
    assert [t.uri_template for t in templates] == ["task://{task_id}", "memory://{memory_id}"]


async def test_listing_pages_through_a_large_board_and_store_and_a_write_between_pages_shifts_nothing(
        client: Client, services: Services) -> None:
    tasks = [await services.kanban.create_task(f"task {n}", "claude-code") for n in range(PAGE_SIZE + 20)]
    memories = [(await services.memory.remember(f"memory number {n} of many")).memory_id for n in range(150)]
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        page = await client.list_resources(cursor=cursor)
        assert len(page.resources) <= PAGE_SIZE
        seen += [resource.uri for resource in page.resources]
        pages += 1
        if pages == 2:  # a memory written now is newer than every page: it must not shift the next ones
            await services.memory.remember("written while a client was paging")
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert pages == 3
    assert len(seen) == len(set(seen))
    assert seen == ["board://current", *(f"task://{t.id}" for t in reversed(tasks)),
                    *seen[1 + len(tasks):]]
    assert {uri[len("memory://"):] for uri in seen[1 + len(tasks):]} == set(memories)
    await refused(client.list_resources(cursor="not-a-cursor"), INVALID_PARAMS, "invalid_cursor: ")


async def test_reading_resources_gives_the_texts_of_the_board_a_task_and_a_memory(
        client: Client, services: Services) -> None:
    task = await services.kanban.create_task("Read me", "claude-code", "the body of the task")
    await services.kanban.add_note(task.id, "a note on it", author="antigravity")
    stored = await services.memory.remember("a memory to read whole", ["one", "two"], "claude-code")
    board = (await client.read_resource("board://current")).contents[0]
    assert board.mime_type == "text/markdown" and f"{task.id} Read me" in board.text  # type: ignore[union-attr]
    card = (await client.read_resource(f"task://{task.id}")).contents[0]
    assert card.uri == f"task://{task.id}"
    assert "the body of the task" in card.text and "antigravity: a note on it" in card.text  # type: ignore[union-attr]
    note = (await client.read_resource(f"memory://{stored.memory_id}")).contents[0]
    assert "a memory to read whole" in note.text  # type: ignore[union-attr]
    assert 'scope="agent:claude-code" tags="one, two" agent="claude-code"' in note.text  # type: ignore[union-attr]


async def test_reading_what_does_not_exist_is_resource_not_found_and_a_bad_id_invalid_params(client: Client) -> None:
    await refused(client.read_resource("task://TASK-99999"), RESOURCE_NOT_FOUND, "task_not_found: ")
    await refused(client.read_resource("memory://0f0e4f49-5a2f-4d0c-9b36-1f6c1d7cb3a1"), RESOURCE_NOT_FOUND,
                  "memory_not_found: ")
    await refused(client.read_resource("board://yesterday"), RESOURCE_NOT_FOUND, "resource_not_found: ")
    await refused(client.read_resource("task://../../etc/passwd"), INVALID_PARAMS, "invalid_task_id: ")


# --- completion ------------------------------------------------------------------------------------


async def test_completion_offers_the_real_task_ids_statuses_agents_and_scopes(client: Client,
                                                                          services: Services) -> None:
    tasks = [await services.kanban.create_task(f"t{n}", "claude-code") for n in range(12)]
    relay = await services.kanban.create_task("relay", "openclaw", steps=["antigravity", "openclaw"])
    stored = await services.memory.remember("a memory of an agent", agent="hermes")
    await services.memory.remember("a project memory", scope="project:apollo")

    async def values(ref: PromptReference | ResourceTemplateReference, name: str, typed: str) -> list[str]:
        return (await client.complete(ref, {"name": name, "value": typed})).completion.values

    handoff = PromptReference(name="handoff")
    assert await values(handoff, "task_id", "1") == [relay.id, tasks[11].id, tasks[10].id, tasks[9].id, tasks[0].id]
    assert await values(handoff, "task_id", "task-0001") == [relay.id, tasks[11].id, tasks[10].id, tasks[9].id]
    assert await values(ResourceTemplateReference(uri="task://{task_id}"), "task_id", "TASK-00002") == [tasks[1].id]
    assert await values(PromptReference(name="board"), "status", "r") == ["running", "review"]
    assert await values(PromptReference(name="my-tasks"), "agent", "") == [
        "antigravity", "claude-code", "hermes", "openclaw"]
    assert await values(PromptReference(name="recall"), "scope", "") == ["agent:hermes", "global", "project:apollo"]
    memory_ref = ResourceTemplateReference(uri="memory://{memory_id}")
    assert await values(memory_ref, "memory_id", stored.memory_id[:6].upper()) == [stored.memory_id]
    assert await values(PromptReference(name="recall"), "query", "dep") == []
    assert await values(PromptReference(name="test_prompt_with_arguments"), "arg1", "test") == []
