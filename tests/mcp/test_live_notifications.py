"""Live notifications with the official Python client on a real server: a change made through REST, or on
another instance, reaches a subscriber over Streamable HTTP and legacy SSE; what stateless mode cannot do."""

from __future__ import annotations

import warnings
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.shared.subscriptions import ResourceUpdated
from mcp_types import (
    INVALID_REQUEST,
    LoggingLevel,
    LoggingMessageNotification,
    ResourceListChangedNotification,
    ResourceUpdatedNotification,
)

from app.settings import Settings
from tests.conftest import SettingsFactory
from tests.kanban.support import write_job_script
from tests.mcp.clients import poll_until, sse_session, streamable_session
from tests.support.server import LiveServer, run_server

Connect = Callable[..., AbstractAsyncContextManager[Client]]
TRANSPORTS = pytest.mark.parametrize("connect", [streamable_session, sse_session], ids=["streamable", "sse"])
NUDGE_EVERY_S = 0.5  # a Streamable HTTP client opens its GET stream just after initialize: an early change is lost
Nudge = Callable[[], Awaitable[object]]


class Inbox:
    """The notifications a client received, and a way to wait for one."""

    def __init__(self) -> None:
        self.messages: list[Any] = []
        self._arrived = anyio.Event()

    async def __call__(self, message: Any) -> None:
        self.messages.append(message)
        self._arrived.set()
        self._arrived = anyio.Event()

    def updated(self) -> list[str]:
        return [m.params.uri for m in self.messages if isinstance(m, ResourceUpdatedNotification)]

    def list_changes(self) -> int:
        return sum(isinstance(m, ResourceListChangedNotification) for m in self.messages)

    def logs(self) -> list[dict[str, Any]]:
        return [{"level": m.params.level, **m.params.data} for m in self.messages
                if isinstance(m, LoggingMessageNotification)]

    async def until(self, found: Callable[[], bool], nudge: Nudge | None = None, within_s: float = 15.0) -> None:
        """Wait for ``found``; ``nudge`` makes another real change each round (for a stream not open yet)."""
        with anyio.fail_after(within_s):
            while not found():
                if nudge is not None:
                    await nudge()
                with anyio.move_on_after(NUDGE_EVERY_S):
                    await self._arrived.wait()


async def subscribe(client: Client, uri: str) -> None:
    with warnings.catch_warnings():  # deprecated for 2026-07-28 clients; every client today uses it
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        await client.subscribe_resource(uri)


async def unsubscribe(client: Client, uri: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        await client.unsubscribe_resource(uri)


async def set_level(client: Client, level: LoggingLevel) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        await client.set_logging_level(level)


async def settle(server: LiveServer) -> None:
    """Wait until the server's watcher has handled every change so far, so no notification is on its way.

    A client that connects after this hears of nothing made before; one that closes after this and a round
    trip has read everything sent to it (the SDK's SSE client raises when a message lands as it closes).
    """
    live = server.app.state.mcp.live
    await poll_until(lambda: server.on_server_loop(live.settled()), bool, within_s=15.0)


async def finish(server: LiveServer, *clients: Client) -> None:
    await settle(server)
    for client in clients:
        await client.list_prompts()  # on the SSE stream, after every notification already sent


def rest(server: LiveServer, headers: dict[str, str] | None = None) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=server.url, headers=headers or {}, timeout=30)


async def new_task(http: httpx.AsyncClient, title: str) -> str:
    created = await http.post("/api/kanban/tasks", json={"title": title, "assignee": "claude-code"})
    assert created.status_code in (200, 201), created.text
    task_id: str = created.json()["id"]
    return task_id


def note_on(http: httpx.AsyncClient, task_id: str) -> Nudge:
    async def add_note() -> None:
        added = await http.post(f"/api/kanban/tasks/{task_id}/notes", json={"text": "progress", "author": "rest"})
        assert added.status_code in (200, 201), added.text

    return add_note


@TRANSPORTS
async def test_a_subscriber_hears_of_a_task_changed_through_rest(live_server: LiveServer, connect: Connect) -> None:
    inbox = Inbox()
    async with rest(live_server) as http:
        task_id = await new_task(http, "Watched task")
        await settle(live_server)
        async with connect(live_server.url, message_handler=inbox, cache=None) as client:
            uri = f"task://{task_id}"
            await subscribe(client, uri)
            await inbox.until(lambda: uri in inbox.updated(), nudge=note_on(http, task_id))
            text = (await client.read_resource(uri)).contents[0].text  # type: ignore[union-attr]
            assert "rest: progress" in text
            await finish(live_server, client)


@TRANSPORTS
async def test_cards_and_memories_appearing_or_going_change_the_list(live_server: LiveServer,
                                                                     connect: Connect) -> None:
    inbox = Inbox()
    created: list[str] = []
    async with rest(live_server) as http, connect(live_server.url, message_handler=inbox, cache=None) as client:

        async def create() -> None:
            created.append(await new_task(http, f"appearing {len(created)}"))

        await client.list_resources()  # a client that listed them wants to know when the list changes
        await inbox.until(lambda: inbox.list_changes() > 0, nudge=create)
        listed = {resource.uri for resource in (await client.list_resources()).resources}
        assert f"task://{created[0]}" in listed
        await finish(live_server, client)
        seen = inbox.list_changes()
        stored = await http.post("/api/lancedb/memories", json={"text": "a memory that comes and goes"})
        memory_id = stored.json()["id"]
        await inbox.until(lambda: inbox.list_changes() > seen)
        await finish(live_server, client)
        seen = inbox.list_changes()
        assert (await http.delete(f"/api/lancedb/memories/{memory_id}")).status_code in (200, 204)
        await inbox.until(lambda: inbox.list_changes() > seen)
        listed = {resource.uri for resource in (await client.list_resources()).resources}
        assert f"memory://{memory_id}" not in listed
        await finish(live_server, client)


async def test_only_what_is_subscribed_and_changed_is_announced(live_server: LiveServer) -> None:
    inbox = Inbox()
    async with rest(live_server) as http:
        quiet, loud = await new_task(http, "Unsubscribed again"), await new_task(http, "Still subscribed")
        await settle(live_server)
        async with sse_session(live_server.url, message_handler=inbox, cache=None) as client:
            await watch_two_hear_one(live_server, http, client, inbox, quiet, loud)


async def watch_two_hear_one(server: LiveServer, http: httpx.AsyncClient, client: Client, inbox: Inbox,
                             quiet: str, loud: str) -> None:
    for uri in (f"task://{quiet}", f"task://{loud}", "board://current"):
        await subscribe(client, uri)
    await unsubscribe(client, f"task://{quiet}")
    await note_on(http, quiet)()
    await note_on(http, loud)()  # after the other: its notification cannot come first
    await inbox.until(lambda: f"task://{loud}" in inbox.updated())
    # A note changes the card's text, not the board's (which lists titles): neither the board nor
    # the unsubscribed task is announced.
    assert inbox.updated() == [f"task://{loud}"]
    moved = await http.post(f"/api/kanban/tasks/{loud}/move", json={"to_status": "running"})
    assert moved.status_code == 200, moved.text
    await inbox.until(lambda: "board://current" in inbox.updated())
    await finish(server, client)


async def test_a_memory_subscriber_hears_of_a_rest_edit(live_server: LiveServer) -> None:
    inbox = Inbox()
    async with rest(live_server) as http:
        memory_id = (await http.post("/api/lancedb/memories", json={"text": "the port is 3002"})).json()["id"]
        await settle(live_server)
        async with sse_session(live_server.url, message_handler=inbox, cache=None) as client:
            uri = f"memory://{memory_id}"
            await subscribe(client, uri)
            edited = await http.patch(f"/api/lancedb/memories/{memory_id}", json={"text": "the port is 3003"})
            assert edited.status_code == 200, edited.text
            await inbox.until(lambda: uri in inbox.updated())
            assert "the port is 3003" in (await client.read_resource(uri)).contents[0].text  # type: ignore[union-attr]
            await finish(live_server, client)


async def test_a_client_that_only_calls_tools_is_sent_nothing(live_server: LiveServer) -> None:
    tools_only, witness = Inbox(), Inbox()
    async with rest(live_server) as http, \
            sse_session(live_server.url, message_handler=tools_only, cache=None) as caller, \
            sse_session(live_server.url, message_handler=witness, cache=None) as lister:
        await caller.call_tool("recall", {"query": "anything"})
        await lister.list_resources()
        await new_task(http, "Seen by the lister only")
        await http.post("/api/lancedb/memories", json={"text": "also seen by the lister only"})
        await witness.until(lambda: witness.list_changes() > 0)
        await finish(live_server, caller, lister)
        assert tools_only.messages == []


async def test_a_change_made_on_another_instance_reaches_a_subscriber(settings: Settings) -> None:
    inbox = Inbox()
    with run_server(settings) as watched, run_server(settings) as other:
        async with rest(other) as http:
            task_id = await new_task(http, "Changed elsewhere")
            await settle(watched)
            async with sse_session(watched.url, message_handler=inbox, cache=None) as client:
                await subscribe(client, f"task://{task_id}")
                await note_on(http, task_id)()
                await inbox.until(lambda: f"task://{task_id}" in inbox.updated())
                await finish(watched, client)


@pytest.fixture
def job_settings(make_settings: SettingsFactory, tmp_path: Path) -> Settings:
    return make_settings(jobs_allow_root=True, job_command=[str(write_job_script(tmp_path / "jobs"))])


async def test_a_finished_job_is_logged_at_the_level_each_client_asked_for(job_settings: Settings) -> None:
    told, quiet = Inbox(), Inbox()
    with run_server(job_settings) as server:
        async with rest(server) as http:
            job_task, watched_task = await new_task(http, "Run the job for me"), await new_task(http, "Watched")
            await settle(server)
            async with sse_session(server.url, message_handler=told) as info, \
                    sse_session(server.url, message_handler=quiet, cache=None) as errors_only:
                await set_level(info, "info")
                await set_level(errors_only, "error")
                await subscribe(errors_only, f"task://{watched_task}")
                started = await http.post("/api/kanban/jobs", json={"task_id": job_task, "wait_s": 30})
                assert started.status_code in (200, 201, 202), started.text
                job = started.json()
                await told.until(lambda: any(log.get("job_id") == job["id"] for log in told.logs()))
                [log] = [log for log in told.logs() if log.get("job_id") == job["id"]]
                assert log == {"level": "notice", "event": "job_ended", "message": f"job {job['id']} for "
                               f"{job_task} succeeded (exit 0)", "job_id": job["id"], "task_id": job_task,
                               "status": "succeeded", "exit_code": 0}
                # The job ended before this note was written, so a log for it would have come first.
                await note_on(http, watched_task)()
                await quiet.until(lambda: f"task://{watched_task}" in quiet.updated())
                assert quiet.logs() == []
                await finish(server, info, errors_only)


async def test_stateless_mode_refuses_subscriptions_but_listen_streams_work(make_settings: SettingsFactory) -> None:
    with run_server(make_settings(stateless_http=True)) as server:
        async with rest(server) as http, streamable_session(server.url, cache=None) as legacy:
            resources = legacy.server_capabilities.resources
            assert resources is not None and (resources.subscribe, resources.list_changed) == (False, False)
            task_id = await new_task(http, "Stateless watch")
            with pytest.raises(MCPError) as caught:
                await subscribe(legacy, f"task://{task_id}")
            assert caught.value.code == INVALID_REQUEST
            assert caught.value.message.startswith("subscriptions_unavailable: ")
            await set_level(legacy, "info")  # accepted; nothing can be sent later anyway

            async with streamable_session(server.url, mode="2026-07-28", cache=None) as modern, \
                    modern.listen(resource_subscriptions=[f"task://{task_id}"]) as events:
                nudge = note_on(http, task_id)
                with anyio.fail_after(15):
                    async with anyio.create_task_group() as group:

                        async def keep_changing() -> None:
                            while True:
                                await nudge()
                                await anyio.sleep(NUDGE_EVERY_S)  # pacing of real changes, not synchronisation

                        group.start_soon(keep_changing)
                        event = await events.__anext__()
                        group.cancel_scope.cancel()
                assert event == ResourceUpdated(uri=f"task://{task_id}")


READ_ONLY = "tok-reader-0123456789"


async def test_a_read_only_token_reads_prompts_and_resources_as_its_tools_read(make_settings: SettingsFactory) -> None:
    settings = make_settings(token="main-token-0123456789", agent_tokens={READ_ONLY: {"agent": "reader", "allow": []}})
    headers = {"Authorization": f"Bearer {READ_ONLY}"}
    with run_server(settings) as server:
        async with rest(server, {"Authorization": "Bearer main-token-0123456789"}) as http, \
                streamable_session(server.url, headers, cache=None) as client:
            task_id = await new_task(http, "Readable by all")
            assert "Readable by all" in (await client.get_prompt("board", {})).messages[0].content.text  # type: ignore[union-attr]
            assert f"task://{task_id}" in {r.uri for r in (await client.list_resources()).resources}
            assert task_id in (await client.read_resource(f"task://{task_id}")).contents[0].text  # type: ignore[union-attr]
            await subscribe(client, f"task://{task_id}")
            refused = await client.call_tool("move_card", {"task_id": task_id, "to_status": "done"})
            assert refused.is_error and refused.content[0].text.startswith("forbidden: ")  # type: ignore[union-attr]
