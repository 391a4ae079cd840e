"""Team mode under load: several memory-mcp instances on one s3:// table (moto) and one PostgreSQL team
database (board and write journal), against LanceDB alone.

    python -m bench.team                                     # 3 instances x 4 clients, 600 remembers
    python -m bench.team --instances 2 --clients 1 --remembers 20   # a quick look

A local S3 (moto's ``moto_server``) gets a bucket and a throw-away PostgreSQL a database; ``--instances``
real server processes (``python -m app.cli serve``, hash embedder) share both. ``--clients`` clients per
instance remember ``--remembers`` new texts in all (REST), one call after another. Meanwhile a prober remembers a text
on one instance and recalls it on the next one until it comes back: the time from the acknowledgement
to that answer is how long a memory takes to reach another instance under load. Afterwards the
table's versions are counted twice: when the load ends and once the instances' pruning has run
(``--settle-s`` at most). Last, in a bucket of its own, the same number of threads as clients append
the same number of single rows with LanceDB alone (no server), for the baseline.

Once the journals are flushed, the LanceDB commits the instances made (``/readyz``) are counted per
second of load, and the fragments the table holds before and after a compaction (``doctor --compact``'s).

Printed: remember p50/p95/p99/max and errors (503s apart), cross-instance visibility p50/p99/max,
commits per second, fragments, versions kept, LanceDB-alone append p50/p99, the ratio of the p50s, and
the write journal's targets (issue 43).
Results go to ``bench/results/team.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import lancedb

from app.memory.embeddings.registry import create_embedder
from app.memory.rows import new_row
from app.memory.store.commits import is_retryable
from app.memory.store.schema import build_schema
from app.settings import Settings
from bench.data import textgen
from bench.support import server as srv
from bench.support.common import machine_info, measure_and_write, output_options, print_table, spread
from bench.support.server import RawConnection

TARGETS = {"remember_p99_s": 0.5, "visible_p99_s": 1.0, "refused": 0, "commits_per_s": 1.2,
           "fragments_after_compaction": 20, "versions_kept": 100}
VISIBLE_TIMEOUT_S = 30.0
REGION = "us-east-1"


# --- a local S3 --------------------------------------------------------------------------------------

@contextmanager
def moto(log_path: Path) -> Iterator[str]:
    """``moto_server`` on a free loopback port; yields its endpoint."""
    from tests.support.server import wait_until_ready  # the tests' helper, outside pytest

    port = srv.free_port()
    server = Path(sys.executable).with_name("moto_server")
    with log_path.open("wb") as log:
        process = subprocess.Popen([str(server), "-H", "127.0.0.1", "-p", str(port)], stdout=log,
                                   stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        wait_until_ready(endpoint, process, 60, path="/", name="moto_server")
        yield endpoint
    finally:
        process.terminate()
        process.wait(10)


def storage_options(endpoint: str) -> dict[str, str]:
    return {"aws_endpoint": endpoint, "allow_http": "true", "aws_access_key_id": "test",
            "aws_secret_access_key": "test", "aws_region": REGION}


def new_bucket(endpoint: str) -> str:
    name = f"bench-{uuid.uuid4().hex[:12]}"
    httpx.put(f"{endpoint}/{name}", timeout=10.0, trust_env=False).raise_for_status()
    return f"s3://{name}/team"


def server_env(uri: str, endpoint: str, team_db: str) -> dict[str, str]:
    return {"MEMORY_MCP_DB_PATH": uri, "MEMORY_MCP_STORAGE_OPTIONS": json.dumps(storage_options(endpoint)),
            "MEMORY_MCP_TEAM_DB": team_db, "AWS_EC2_METADATA_DISABLED": "true", "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost"}


async def journals(urls: list[str], flushed: bool = True, timeout_s: float = 120.0) -> list[dict[str, Any]]:
    """Every instance's journal status, once every journal is flushed (``flushed``)."""
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(timeout=10.0, trust_env=False) as http:
        while True:
            found = [(await http.get(f"{url}/readyz")).json()["memory"]["journal"] for url in urls]
            if not flushed or all(j["depth"] == 0 for j in found) or time.monotonic() > deadline:
                return found
            await asyncio.sleep(0.2)  # polling the instances' own progress, bounded by the deadline


def fragments(uri: str, endpoint: str) -> int:
    table = lancedb.connect(uri, storage_options=storage_options(endpoint)).open_table("memories")
    return int(table.stats()["fragment_stats"]["num_fragments"])


def compact(uri: str, endpoint: str) -> None:
    """What ``memory-mcp doctor --compact`` does to the table."""
    from app.memory.reembed import compact_table

    compact_table(Settings(db_path=uri, storage_options=storage_options(endpoint), embedding_provider="hash"))


# --- the load ----------------------------------------------------------------------------------------

async def _client(url: str, texts: list[str], latencies: list[float], errors: dict[str, Any]) -> None:
    connection = await RawConnection.open(url)
    try:
        while texts:
            text = texts.pop()
            started = time.perf_counter()
            status, body = await connection.request("POST", "/api/lancedb/memories", {"text": text})
            latencies.append(time.perf_counter() - started)
            if status != 200:
                errors["refused" if status == 503 else "other"] += 1
                errors.setdefault("first", f"{status} {body[:300].decode(errors='replace')}")
    finally:
        await connection.close()


async def _visible(writer: str, reader: str, text: str) -> float | None:
    """Seconds from the acknowledgement of ``text`` on ``writer`` until ``reader`` recalls it; None if never."""
    write = await RawConnection.open(writer)
    read = await RawConnection.open(reader)
    try:
        status, body = await write.request("POST", "/api/lancedb/memories", {"text": text})
        if status != 200:
            return None
        memory_id = json.loads(body)["id"]
        acknowledged = time.perf_counter()
        while time.perf_counter() - acknowledged < VISIBLE_TIMEOUT_S:
            status, body = await read.request("GET", f"/api/lancedb/vector-search?{urlencode({'q': text, 'limit': 5})}")
            if status == 200 and any(hit["id"] == memory_id for hit in json.loads(body)):
                return time.perf_counter() - acknowledged
            await asyncio.sleep(0.02)  # polls the other instance; the wait itself is what is measured
        return None
    finally:
        await write.close()
        await read.close()


async def _prober(urls: list[str], done: asyncio.Event, waits: list[float | None]) -> None:
    n = 0
    while not done.is_set():
        writer, reader = urls[n % len(urls)], urls[(n + 1) % len(urls)]
        waits.append(await _visible(writer, reader, f"probe {n}: the {uuid.uuid4().hex[:8]} runbook lives in ops"))
        n += 1


async def team_load(urls: list[str], clients: int, remembers: int) -> dict[str, Any]:
    texts = [f"{text} ({uuid.uuid4().hex[:6]})" for text in textgen.sentences(remembers)]
    queues = [texts[i::len(urls) * clients] for i in range(len(urls) * clients)]
    latencies: list[float] = []
    errors: dict[str, Any] = {"refused": 0, "other": 0}
    waits: list[float | None] = []
    done = asyncio.Event()
    started = time.perf_counter()
    prober = asyncio.create_task(_prober(urls, done, waits))
    await asyncio.gather(*(_client(urls[i % len(urls)], queue, latencies, errors) for i, queue in enumerate(queues)))
    seconds = time.perf_counter() - started
    done.set()
    await prober
    return {"remember": _seconds(latencies), "errors": errors, "seconds": round(seconds, 2),
            "remembers_per_s": round(len(latencies) / seconds, 1),
            "visible": _seconds([w for w in waits if w is not None]), "never_visible": sum(w is None for w in waits)}


def versions(uri: str, endpoint: str) -> int:
    """The versions the table keeps (a listing that a prune running meanwhile can break: then again)."""
    table = lancedb.connect(uri, storage_options=storage_options(endpoint)).open_table("memories")
    for attempt in range(10):
        try:
            return len(table.list_versions())
        except RuntimeError:  # a manifest listed, then pruned before it was read
            if attempt == 9:
                raise
    raise AssertionError("unreachable")


async def settled_versions(uri: str, endpoint: str, settle_s: float, bound: int) -> tuple[int, float]:
    """Versions kept once pruning brought them to ``bound`` (or ``settle_s`` passed), and how long it took."""
    started = time.perf_counter()
    count = await asyncio.to_thread(versions, uri, endpoint)
    while count > bound and time.perf_counter() - started < settle_s:
        await asyncio.sleep(1.0)  # the instances prune on their own clock; this only looks
        count = await asyncio.to_thread(versions, uri, endpoint)
    return count, round(time.perf_counter() - started, 1)


def _seconds(seconds: Sequence[float]) -> dict[str, Any]:
    return spread(seconds, unit="s", quantiles=(50, 95, 99))


# --- LanceDB alone -----------------------------------------------------------------------------------

def lancedb_alone(uri: str, endpoint: str, threads: int, appends: int) -> dict[str, Any]:
    """``threads`` threads append ``appends`` single rows in all, each through its own connection."""
    embedder = create_embedder(Settings(embedding_provider="hash"))
    options = storage_options(endpoint)
    lancedb.connect(uri, storage_options=options).create_table("memories", schema=build_schema(embedder))
    vectors = asyncio.run(embedder.embed_documents([f"alone {i}" for i in range(appends)]))
    rows = [new_row(f"alone {i}", vectors[i], "global", [], 0.5, None, embedder.model) for i in range(appends)]
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()

    def appender(mine: list[dict[str, Any]]) -> None:
        table = lancedb.connect(uri, storage_options=options).open_table("memories")
        for row in mine:
            started = time.perf_counter()
            for attempt in range(8):
                try:
                    table.add([row])
                    break
                except Exception as exc:  # noqa: BLE001 - counted; the benchmark reports it
                    if attempt == 7 or not is_retryable(exc):
                        with lock:
                            errors.append(str(exc)[:200])
                        break
            with lock:
                latencies.append(time.perf_counter() - started)

    workers = [threading.Thread(target=appender, args=(rows[i::threads],)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return {"append": _seconds(latencies), "errors": len(errors), "first_error": errors[:1]}


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    from tests.support.postgres import temporary_postgres

    payload: dict[str, Any] = {"machine": machine_info(), "targets": TARGETS,
                               "load": {"instances": args.instances, "clients_per_instance": args.clients,
                                        "remembers": args.remembers}}
    with tempfile.TemporaryDirectory(prefix="bench-team-") as tmp, ExitStack() as stack:
        root = Path(tmp)
        endpoint = stack.enter_context(moto(root / "moto.log"))
        team_db = stack.enter_context(temporary_postgres()).url()
        uri = new_bucket(endpoint)
        urls = []
        for n in range(args.instances):
            home = root / f"s{n}"
            home.mkdir()
            server = stack.enter_context(srv.serve(home / "lancedb", root / f"server-{n}.log", provider="hash",
                                                   extra_env=server_env(uri, endpoint, team_db)))
            urls.append(server.url)
        before = await journals(urls, flushed=False)
        started = time.perf_counter()
        team = payload["team"] = await team_load(urls, args.clients, args.remembers)
        after = await journals(urls)
        window = time.perf_counter() - started  # from the first remember until the table holds the last
        team["commits"] = sum(j["commits"] for j in after) - sum(j["commits"] for j in before)
        team["commits_per_s"] = round(team["commits"] / max(window, 1.0), 2)
        team["flushers"] = sum(1 for j in after if j["commits"])
        team["fragments_at_end"] = await asyncio.to_thread(fragments, uri, endpoint)
        await asyncio.to_thread(compact, uri, endpoint)
        team["fragments_after_compaction"] = await asyncio.to_thread(fragments, uri, endpoint)
        team["versions_at_end"] = await asyncio.to_thread(versions, uri, endpoint)
        kept, waited = await settled_versions(uri, endpoint, args.settle_s, TARGETS["versions_kept"])
        team["versions_kept"] = kept
        team["versions_settled_after_s"] = waited
        payload["lancedb_alone"] = await asyncio.to_thread(lancedb_alone, new_bucket(endpoint), endpoint,
                                                           args.instances * args.clients,
                                                           min(args.remembers, args.alone_appends))
    team, alone = payload["team"], payload["lancedb_alone"]
    payload["remember_p50_vs_lancedb"] = round(team["remember"]["p50_s"] / alone["append"]["p50_s"], 2)
    payload["met"] = {
        "remember_p99_s": team["remember"]["p99_s"] <= TARGETS["remember_p99_s"],
        "visible_p99_s": team["never_visible"] == 0 and team["visible"]["p99_s"] <= TARGETS["visible_p99_s"],
        "refused": team["errors"]["refused"] + team["errors"]["other"] <= TARGETS["refused"],
        "commits_per_s": team["commits_per_s"] <= TARGETS["commits_per_s"],
        "fragments_after_compaction": team["fragments_after_compaction"] <= TARGETS["fragments_after_compaction"],
        "versions_kept": team["versions_kept"] <= TARGETS["versions_kept"],
    }
    return payload


def report(payload: dict[str, Any]) -> None:
    team, alone, load = payload["team"], payload["lancedb_alone"], payload["load"]
    title = f"Team mode on moto: {load['instances']} instances x {load['clients_per_instance']} clients, " \
            f"{load['remembers']} remembers ({team['seconds']} s, {team['remembers_per_s']}/s)"
    rows = [[name, s["n"], s["p50_s"], s["p95_s"], s["p99_s"], s["max_s"]] for name, s in (
        ("remember (s)", team["remember"]), ("visible on another instance (s)", team["visible"]),
        ("LanceDB alone: append (s)", alone["append"]))]
    print_table(title, ["", "n", "p50", "p95", "p99", "max"], rows)
    errors = team["errors"]
    print(f"errors: {errors['refused']} refused (503), {errors['other']} other {errors.get('first', '')}; "
          f"never visible: {team['never_visible']}; LanceDB alone errors: {alone['errors']}")
    print(f"LanceDB commits: {team['commits']} by {team['flushers']} instance(s), {team['commits_per_s']}/s; "
          f"fragments {team['fragments_at_end']} at the end, {team['fragments_after_compaction']} after a compaction; "
          f"versions: {team['versions_at_end']} when the load ended, {team['versions_kept']} kept "
          f"{team['versions_settled_after_s']} s later; remember p50 / LanceDB alone append p50: "
          f"{payload['remember_p50_vs_lancedb']}")
    met = payload["met"]
    print_table("Targets", ["target", "wanted", "measured", "met"], [
        ["remember p99 (s)", TARGETS["remember_p99_s"], team["remember"]["p99_s"], met["remember_p99_s"]],
        ["visible p99 (s)", TARGETS["visible_p99_s"], team["visible"]["p99_s"], met["visible_p99_s"]],
        ["refused", TARGETS["refused"], errors["refused"] + errors["other"], met["refused"]],
        ["LanceDB commits per s", TARGETS["commits_per_s"], team["commits_per_s"], met["commits_per_s"]],
        ["fragments after compaction", TARGETS["fragments_after_compaction"], team["fragments_after_compaction"],
         met["fragments_after_compaction"]],
        ["versions kept", TARGETS["versions_kept"], team["versions_kept"], met["versions_kept"]]])


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=3, help="server processes sharing the table")
    parser.add_argument("--clients", type=int, default=4, help="remember clients per instance")
    parser.add_argument("--remembers", type=int, default=600, help="remembers in all")
    parser.add_argument("--settle-s", type=float, default=60.0, help="longest wait for pruning after the load")
    parser.add_argument("--alone-appends", type=int, default=600,
                        help="single-row appends of the LanceDB-alone baseline, at most (it takes minutes on moto)")
    output_options(parser, "team", cache=False)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    return measure_and_write(parse_args(argv), main_async, report)


if __name__ == "__main__":
    main()
