"""The kanban board on SQLite and on PostgreSQL: what each call costs, and creates from several instances.

    python -m bench.lab.board                                  # starts a temporary PostgreSQL (initdb, pg_ctl)
    python -m bench.lab.board --url postgresql://u@host/db     # an existing, empty database
    python -m bench.lab.board --tasks 500 --instances 3

Per backend, through ``KanbanService`` in-process (so the time is the store's, not HTTP's): ``--tasks``
creates one after another, a claim (``move_card`` with ``expected_status``) of each, a note on each,
``get_board`` and ``get_task`` reads, and the change marker the dashboard polls. Then ``--instances``
services on the one PostgreSQL board create ``--tasks`` tasks between them at once (the write lock makes
them take turns): throughput, and a check that every id was numbered once. Results go to
``bench/results/board.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AsyncExitStack, contextmanager
from pathlib import Path
from typing import Any

from app.kanban.service import KanbanService
from app.settings import Settings
from bench.support.common import machine_info, percentile, print_table, write_json


def _settings(kanban_db: str | Path, tmp: Path) -> Settings:
    return Settings(db_path=tmp / "lancedb", kanban_db=kanban_db, embedding_provider="hash", log_format="text")


async def _timed(call: Callable[[], Awaitable[Any]], times: list[float]) -> None:
    started = time.perf_counter()
    await call()
    times.append(time.perf_counter() - started)


async def _calls(settings: Settings, tasks: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in ("create", "claim", "note", "get_board", "get_task",
                                                           "change_marker")}
    async with KanbanService.open(settings) as kanban:
        ids: list[str] = []
        for n in range(tasks):
            started = time.perf_counter()
            ids.append((await kanban.create_task(f"task {n}", "bench")).id)
            times["create"].append(time.perf_counter() - started)
        for task_id in ids:
            await _timed(lambda t=task_id: kanban.move_card(t, "running", expected_status="todo"), times["claim"])
            await _timed(lambda t=task_id: kanban.add_note(t, "a note"), times["note"])
            await _timed(lambda t=task_id: kanban.get_task(t), times["get_task"])
            await _timed(kanban.change_marker, times["change_marker"])
        for _ in range(min(tasks, 100)):
            await _timed(kanban.get_board, times["get_board"])
    return times


async def _instances(settings: Settings, instances: int, tasks: int) -> dict[str, Any]:
    async with AsyncExitStack() as stack:
        services = [await stack.enter_async_context(KanbanService.open(settings)) for _ in range(instances)]
        started = time.perf_counter()

        async def creator(kanban: KanbanService, count: int) -> list[str]:
            return [(await kanban.create_task("concurrent", "bench")).id for _ in range(count)]

        created = await asyncio.gather(*(creator(s, tasks // instances) for s in services))
        seconds = time.perf_counter() - started
    ids = [task_id for chunk in created for task_id in chunk]
    return {"instances": instances, "tasks": len(ids), "seconds": round(seconds, 3),
            "creates_per_s": round(len(ids) / seconds, 1), "ids_unique": len(set(ids)) == len(ids)}


@contextmanager
def _postgres(url: str | None) -> Iterator[tuple[str, float | None]]:
    if url:
        yield url, None
        return
    from tests.support.postgres import temporary_postgres  # the test fixture's server, outside pytest

    with temporary_postgres() as server:
        yield server.url(), server.start_s


def _database(admin_url: str, name: str) -> str:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')  # a fixed name, never input
    return admin_url.rsplit("/", 1)[0] + f"/{name}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="an existing PostgreSQL server (its default database is used to create two)")
    parser.add_argument("--tasks", type=int, default=300)
    parser.add_argument("--instances", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_dir, _postgres(args.url) as (admin_url, start_s):
        tmp = Path(tmp_dir)
        backends = {"sqlite": tmp / "board.sqlite3", "postgres": _database(admin_url, "bench_board_calls")}
        results: dict[str, Any] = {"machine": machine_info(), "tasks": args.tasks, "postgres_start_s": start_s}
        rows = []
        for name, location in backends.items():
            times = asyncio.run(_calls(_settings(location, tmp), args.tasks))
            results[name] = {call: {"p50_ms": percentile(v, 50) * 1000, "p99_ms": percentile(v, 99) * 1000}
                             for call, v in times.items()}
            rows += [(name, call, v["p50_ms"], v["p99_ms"]) for call, v in results[name].items()]
        print_table(f"board calls in-process, {args.tasks} tasks", ["backend", "call", "p50 ms", "p99 ms"], rows)
        shared = _settings(_database(admin_url, "bench_board_shared"), tmp)
        results["instances"] = asyncio.run(_instances(shared, args.instances, args.tasks))
        together = results["instances"]
        print_table("creates from several instances on one PostgreSQL board",
                    ["instances", "tasks", "seconds", "creates/s", "ids unique"],
                    [(together["instances"], together["tasks"], together["seconds"], together["creates_per_s"],
                      together["ids_unique"])])
        if start_s is not None:
            print(f"temporary PostgreSQL started (initdb + pg_ctl start) in {start_s:.2f} s")
    print(f"results: {write_json('board', results)}")


if __name__ == "__main__":
    main()
