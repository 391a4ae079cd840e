"""Three servers on one s3:// table (moto) and one PostgreSQL team database (board and write journal); the one
that flushes the journal into the table dies mid-flush (after its LanceDB commit, before the journal records
it) under load, and is restarted. Every acknowledged memory is on every server and in the table exactly once,
every server shows the same board, and no task is claimed twice."""

from __future__ import annotations

from collections import Counter
from contextlib import ExitStack
from pathlib import Path

import anyio
import httpx
import pytest

from tests.mcp.clients import poll_until
from tests.support.s3 import Bucket
from tests.support.server import ServerProcess, spawn_server
from tests.team.servers import journals_flushed, table, team_env

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
SERVERS = 3
CLIENTS_PER_SERVER = 2
MAX_REMEMBERS_PER_CLIENT = 300  # clients write until the restarted server took writes again, at most this
TASKS = 12
KILL_AFTER_ACKNOWLEDGED = 15  # the flusher dies while every client is still writing
AFTER_RESTART = 4  # writes the restarted server takes before the load stops


class Team:
    """The servers by position; the victim's entry is replaced by its restart."""

    def __init__(self, stack: ExitStack, bucket: Bucket, tmp_path: Path, team_db: str) -> None:
        self._stack, self._tmp = stack, tmp_path
        self.failpoints = [tmp_path / f"failpoints-{n}" for n in range(SERVERS)]
        for directory in self.failpoints:
            directory.mkdir()
        self.env = [team_env(bucket, tmp_path, f"s{n}", team_db, MEMORY_MCP_TEST_FAILPOINTS_DIR=str(self.failpoints[n]))
                    for n in range(SERVERS)]
        self.servers: list[ServerProcess | None] = [self._start(n, "first") for n in range(SERVERS)]

    def _start(self, n: int, run: str) -> ServerProcess:
        return self._stack.enter_context(spawn_server(self.env[n], log_path=self._tmp / f"server-{n}-{run}.log"))

    def url(self, n: int) -> str | None:
        server = self.servers[n]
        return None if server is None else server.url

    def crash_mid_flush(self, n: int) -> None:
        """Arm server ``n``'s failpoint: at its next flush it exits after the LanceDB commit, before the
        journal records the flush, as a kill -9 at that instant would leave it."""
        server = self.servers[n]
        assert server is not None
        (self.failpoints[n] / "flush_committed").touch()
        code = server.process.wait(60)
        assert code == 137, f"server {n} exited with {code}"
        self.servers[n] = None
        (self.failpoints[n] / "flush_committed").unlink()

    def restart(self, n: int) -> None:
        self.servers[n] = self._start(n, "restarted")


async def _all_ids(http: httpx.AsyncClient, url: str) -> list[str]:
    ids: list[str] = []
    while True:
        page = await http.get(f"{url}/api/lancedb/memories", params={"limit": 200, "offset": len(ids)})
        assert page.status_code == 200, page.text
        ids += [memory["id"] for memory in page.json()]
        if len(page.json()) < 200:
            return ids


async def _board(http: httpx.AsyncClient, url: str) -> tuple[object, list[dict[str, object]]]:
    board = (await http.get(f"{url}/api/kanban/board")).json()
    tasks = [(await http.get(f"{url}/api/kanban/tasks/{t['id']}")).json()
             for t in (await http.get(f"{url}/api/kanban/tasks")).json()]
    return board, tasks


async def test_a_server_killed_mid_load_and_restarted_loses_and_duplicates_nothing(
        s3_bucket: Bucket, tmp_path: Path, postgres_url: str) -> None:
    acknowledged: list[str] = []
    claims: Counter[str] = Counter()
    killed, done = anyio.Event(), anyio.Event()
    at_kill: list[int] = []
    victim_after_restart: list[str] = []
    victim: list[int] = []
    with ExitStack() as stack:
        team = Team(stack, s3_bucket, tmp_path, postgres_url)
        async with httpx.AsyncClient(timeout=60, trust_env=False) as http:
            task_ids = [(await http.post(f"{team.url(0)}/api/kanban/tasks",
                                         json={"title": f"work {n}", "assignee": "anyone"})).json()["id"]
                        for n in range(TASKS)]

            async def client(n: int, c: int) -> None:
                for i in range(MAX_REMEMBERS_PER_CLIENT):
                    if done.is_set():
                        return
                    url = team.url(n)
                    if url is None:  # the victim is down: its clients wait for the restart
                        await killed.wait()
                        await poll_until(lambda: _ready(team, n), bool, within_s=120)
                        url = team.url(n)
                    try:
                        memory = await http.post(f"{url}/api/lancedb/memories",
                                                 json={"text": f"server {n} client {c} fact {i}"})
                        assert memory.status_code == 200, memory.text  # the journal never refuses for slowness
                        if memory.status_code == 200:
                            acknowledged.append(memory.json()["id"])
                            if victim and n == victim[0] and killed.is_set():
                                victim_after_restart.append(memory.json()["id"])
                        task_id = task_ids[(i + c) % TASKS]
                        claim = await http.post(f"{url}/api/kanban/tasks/{task_id}/move",
                                                json={"to_status": "running", "expected_status": "todo",
                                                      "actor": f"s{n}c{c}"})
                        if claim.status_code == 200:
                            claims[task_id] += 1
                        else:
                            assert claim.json()["code"] == "status_conflict", claim.text
                    except httpx.TransportError:
                        assert victim and n == victim[0], f"server {n} failed a request"  # the victim's calls die

            async def chaos() -> None:
                await poll_until(lambda: _count(acknowledged), lambda n: n >= KILL_AFTER_ACKNOWLEDGED, within_s=180)
                victim.append(await poll_until(lambda: _flusher(http, team), lambda n: n is not None, within_s=60))
                await anyio.to_thread.run_sync(team.crash_mid_flush, victim[0])
                at_kill.append(len(acknowledged))
                killed.set()
                await anyio.to_thread.run_sync(team.restart, victim[0])
                await poll_until(lambda: _count(victim_after_restart), lambda n: n >= AFTER_RESTART, within_s=120)
                done.set()

            with anyio.fail_after(400):
                async with anyio.create_task_group() as group:
                    group.start_soon(chaos)
                    for n in range(SERVERS):
                        for c in range(CLIENTS_PER_SERVER):
                            group.start_soon(client, n, c)

            assert at_kill[0] < len(acknowledged) - CLIENTS_PER_SERVER * 3  # the kill came mid-load
            assert victim_after_restart  # and the restarted server took writes again
            assert len(set(acknowledged)) == len(acknowledged)
            await journals_flushed(http, [server for server in team.servers if server is not None])
            for n in range(SERVERS):
                url = team.url(n)
                assert url is not None
                ids = await poll_until(lambda url=url: _all_ids(http, url),  # type: ignore[misc]
                                       lambda ids: set(acknowledged) <= set(ids), within_s=30)
                assert len(ids) == len(set(ids)), f"server {n} lists a memory twice"
            boards = [await _board(http, url) for url in (team.url(n) for n in range(SERVERS)) if url is not None]
    assert len(boards) == SERVERS and all(board == boards[0] for board in boards)
    assert all(wins == 1 for wins in claims.values())  # acknowledged claims: at most one per task
    for task in boards[0][1]:
        starts = [h for h in task["history"] if h["to_status"] == "running"]  # type: ignore[attr-defined]
        assert len(starts) <= 1, f"{task['id']} was claimed twice: {starts}"
        assert (task["status"] == "running") == bool(starts)
        if claims[task["id"]]:  # type: ignore[index]
            assert task["status"] == "running"
    stored = table(s3_bucket).to_arrow().column("id").to_pylist()
    assert len(stored) == len(set(stored)) and set(acknowledged) <= set(stored)


async def _count(items: list[str]) -> int:
    return len(items)


async def _ready(team: Team, n: int) -> bool:
    return team.url(n) is not None


async def _flusher(http: httpx.AsyncClient, team: Team) -> int | None:
    """The server holding the flush lease (the one that writes the table), once one has flushed."""
    for n in range(SERVERS):
        url = team.url(n)
        if url is not None and (await http.get(f"{url}/readyz")).json()["memory"]["journal"]["flusher"]:
            return n
    return None
