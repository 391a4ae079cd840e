"""Two live instances on one PostgreSQL board: one board, ids numbered once, one winner per claim, live events."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import anyio
import httpx
import pytest

from tests.conftest import SettingsFactory
from tests.support.server import LiveServer, run_server

WAIT_S = 10.0


@pytest.fixture
def pair(make_settings: SettingsFactory, tmp_path: Path, postgres_url: str) -> Iterator[tuple[LiveServer, LiveServer]]:
    """Instances A and B: each its own memory directory, one board in PostgreSQL."""
    with ExitStack() as stack:
        a, b = (stack.enter_context(run_server(make_settings(db_path=tmp_path / f"lancedb-{name}",
                                                             kanban_db=postgres_url)))
                for name in ("a", "b"))
        # Both apps share the routers' module-level parameter objects, and FastAPI completes a route on its first
        # match; two servers in one process doing that at once race on them. One request each, in turn, first.
        for server in (a, b):
            assert httpx.get(f"{server.url}/api/no-such-route", timeout=30).status_code == 404
        yield a, b


def api(server: LiveServer) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=f"{server.url}/api/kanban", timeout=httpx.Timeout(30, read=None))


async def test_a_task_made_on_one_instance_is_the_same_task_on_the_other(pair: tuple[LiveServer, LiveServer]) -> None:
    a, b = pair
    async with api(a) as on_a, api(b) as on_b:
        created = (await on_a.post("/tasks", json={"title": "Shared", "assignee": "a", "actor": "lead"})).json()
        assert created["id"] == "TASK-00001"
        assert (await on_b.get(f"/tasks/{created['id']}")).json()["title"] == "Shared"
        assert (await on_b.post(f"/tasks/{created['id']}/move", json={"to_status": "review"})).status_code == 200
        assert (await on_b.post(f"/tasks/{created['id']}/notes", json={"text": "from B"})).status_code == 201
        on_a_detail = (await on_a.get(f"/tasks/{created['id']}")).json()
        assert on_a_detail["status"] == "review" and [n["text"] for n in on_a_detail["notes"]] == ["from B"]
        assert (await on_a.get("/board")).json() == (await on_b.get("/board")).json()
        assert (await on_b.delete(f"/tasks/{created['id']}")).status_code == 200
        assert (await on_a.get(f"/tasks/{created['id']}")).json()["code"] == "task_not_found"


async def test_ids_are_numbered_once_under_concurrent_creates_on_both_instances(
    pair: tuple[LiveServer, LiveServer]
) -> None:
    async with api(pair[0]) as on_a, api(pair[1]) as on_b:
        responses = await asyncio.gather(*(
            http.post("/tasks", json={"title": f"t{n}", "assignee": "a"}) for n in range(30) for http in (on_a, on_b)))
        assert {r.status_code for r in responses} == {201}
        ids = sorted(r.json()["id"] for r in responses)
        assert ids == [f"TASK-{n:05d}" for n in range(1, 61)]
        for http in (on_a, on_b):
            assert sorted(t["id"] for t in (await http.get("/tasks")).json()) == ids


async def test_a_claim_raced_from_both_instances_has_exactly_one_winner(pair: tuple[LiveServer, LiveServer]) -> None:
    async with api(pair[0]) as on_a, api(pair[1]) as on_b:
        task_ids = [(await on_a.post("/tasks", json={"title": f"c{n}", "assignee": "a"})).json()["id"]
                    for n in range(10)]
        claim = {"to_status": "running", "expected_status": "todo"}
        for task_id in task_ids:
            responses = await asyncio.gather(*(
                http.post(f"/tasks/{task_id}/move", json={**claim, "actor": name})
                for _ in range(3) for name, http in (("a", on_a), ("b", on_b))))
            assert sorted(r.status_code for r in responses) == [200, 409, 409, 409, 409, 409]
            assert {r.json()["code"] for r in responses if r.status_code == 409} == {"status_conflict"}
            history = (await on_b.get(f"/tasks/{task_id}")).json()["history"]
            assert [h["to_status"] for h in history] == ["todo", "running"]


async def _next_event(lines: object) -> tuple[str, dict[str, object]]:
    name = None
    async for line in lines:  # type: ignore[attr-defined]
        if line.startswith("event:"):
            name = line.partition(":")[2].strip()
        elif line.startswith("data:") and name is not None:
            return name, json.loads(line.partition(":")[2])
    raise AssertionError("the event stream ended")


async def test_the_event_stream_of_one_instance_reports_a_board_change_made_on_the_other(
    pair: tuple[LiveServer, LiveServer]
) -> None:
    a, b = pair
    async with (
        api(a) as on_a,
        httpx.AsyncClient(base_url=b.url, timeout=httpx.Timeout(WAIT_S, read=None)) as http,
        http.stream("GET", "/api/events") as response,
    ):
        assert response.status_code == 200
        lines = response.aiter_lines()
        with anyio.fail_after(WAIT_S):
            name, ready = await _next_event(lines)
        assert name == "ready" and isinstance(ready["board"], int)
        assert (await on_a.post("/tasks", json={"title": "seen on B", "assignee": "a"})).status_code == 201
        with anyio.fail_after(WAIT_S):
            name, data = await _next_event(lines)
        assert name == "board" and data["marker"] != ready["board"]
