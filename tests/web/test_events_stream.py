"""The contract of ``GET /api/events`` on the wire: events, keep-alive, edge rules, token, stream limit."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import anyio
import httpx
import pytest
from pydantic import SecretStr

from app.web import events
from tests.conftest import SettingsFactory
from tests.support.server import LiveServer, run_server

TOKEN = "events-test-token-51c2"
WAIT_S = 10.0


class StreamReader:
    """Reads one stream in a task: its events as (name, data), and its comment lines."""

    def __init__(self) -> None:
        self._events_in, self._events = anyio.create_memory_object_stream[tuple[str, dict[str, object]]](100)
        self._comments_in, self._comments = anyio.create_memory_object_stream[str](100)

    async def next_event(self) -> tuple[str, dict[str, object]]:
        with anyio.fail_after(WAIT_S):
            return await self._events.receive()

    async def next_comment(self) -> str:
        with anyio.fail_after(WAIT_S):
            return await self._comments.receive()

    def close(self) -> None:
        for stream in (self._events_in, self._events, self._comments_in, self._comments):
            stream.close()

    def no_event_pending(self) -> bool:
        return self._events.statistics().current_buffer_used == 0

    async def read(self, response: httpx.Response) -> None:
        name, data = None, None
        async for line in response.aiter_lines():
            if line.startswith(":"):
                await self._comments_in.send(line)
            elif line.startswith("event:"):
                name = line.partition(":")[2].strip()
            elif line.startswith("data:"):
                data = json.loads(line.partition(":")[2])
            elif line == "" and name is not None:
                await self._events_in.send((name, data or {}))
                name, data = None, None


@asynccontextmanager
async def open_stream(http: httpx.AsyncClient) -> AsyncIterator[StreamReader]:
    """The stream, read by a task until the block ends; then closed, which the server sees at once."""
    async with http.stream("GET", "/api/events") as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["cache-control"] == "no-store"
        reader = StreamReader()
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(reader.read, response)
                yield reader
                group.cancel_scope.cancel()
        finally:
            reader.close()


def client(server: LiveServer) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=server.url, timeout=httpx.Timeout(WAIT_S, read=None))


async def test_the_stream_says_ready_then_names_the_list_each_write_changed(make_settings: SettingsFactory) -> None:
    settings = make_settings()
    with run_server(settings) as server:
        async with client(server) as http, open_stream(http) as stream:
            name, ready = await stream.next_event()
            assert name == "ready" and set(ready) == {"memories", "board"}
            assert all(isinstance(value, int) for value in ready.values())

            assert (await http.post("/api/lancedb/memories", json={"text": "a fact"})).is_success
            assert (await stream.next_event())[0] == "memories"
            task = (await http.post("/api/kanban/tasks", json={"title": "t", "assignee": "a"})).json()
            assert (await stream.next_event())[0] == "board"

            # Another process's commit to the board's file counts too (here: a plain sqlite3 connection).
            with sqlite3.connect(settings.kanban_db_path) as other:
                other.execute("UPDATE tasks SET title = 'renamed' WHERE id = ?", (task["id"],))
            other.close()
            assert (await stream.next_event())[0] == "board"
            assert stream.no_event_pending()  # one write, one event


async def test_an_idle_stream_carries_keep_alive_comments(
    make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(events, "KEEPALIVE_S", 0.2)
    with run_server(make_settings()) as server:
        async with client(server) as http, open_stream(http) as stream:
            assert (await stream.next_event())[0] == "ready"
            assert await stream.next_comment() == ": keep-alive"
            assert await stream.next_comment() == ": keep-alive"
            assert stream.no_event_pending()


async def test_the_stream_keeps_the_edge_rules_and_needs_the_token(make_settings: SettingsFactory) -> None:
    with run_server(make_settings(token=SecretStr(TOKEN))) as server:
        async with client(server) as http:
            refused = await http.get("/api/events")
            assert (refused.status_code, refused.json()["code"]) == (401, "unauthorized")
            assert refused.headers["www-authenticate"].startswith("Bearer")
            assert (await http.get("/api/events", params={"token": TOKEN})).status_code == 401  # only the header
            auth = {"Authorization": f"Bearer {TOKEN}"}
            assert (await http.get("/api/events", headers={**auth, "Host": "evil.example"})).status_code == 421
            assert (await http.get("/api/events", headers={**auth, "Origin": "http://evil.example"})).status_code == 403
            http.headers.update({**auth, "Origin": server.url})
            async with open_stream(http) as stream:
                assert (await stream.next_event())[0] == "ready"


async def test_40_unread_streams_of_one_token_end_its_oldest_and_another_token_streams_at_once(
    make_settings: SettingsFactory,
) -> None:
    unread = 40
    assert unread > events.MAX_STREAMS
    tokens = {"tok-events-hoarder": "hoarder", "tok-events-viewer": "viewer"}
    with run_server(make_settings(agent_tokens=tokens)) as server:
        limits = httpx.Limits(max_connections=unread + 4)
        hoarder = {"Authorization": "Bearer tok-events-hoarder"}
        async with httpx.AsyncClient(base_url=server.url, limits=limits, timeout=WAIT_S) as http, \
                AsyncExitStack() as held:
            streams = [await held.enter_async_context(http.stream("GET", "/api/events", headers=hoarder))
                       for _ in range(unread)]  # opened and never read
            http.headers.update({"Authorization": "Bearer tok-events-viewer"})
            async with open_stream(http) as other:
                assert (await other.next_event())[0] == "ready"
            # The oldest of the hoarder's streams gave way: its body ends cleanly instead of running on.
            with anyio.fail_after(WAIT_S):
                oldest = [chunk async for chunk in streams[0].aiter_bytes()]
            assert b"event: ready" in b"".join(oldest)
            assert [stream.status_code for stream in streams] == [200] * unread
