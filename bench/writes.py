"""Writes on one machine: how fast a remember is acknowledged, and what neighbours on the table do to it.

    python -m bench.writes                                   # 100k rows, hash embedder, 32 clients, 10 s phases
    python -m bench.writes --rows 10000 --seconds 4          # a quick look

The speed benchmark's memories (``--rows``) are bulk-loaded and served by a real server process. Each phase
runs ``--clients`` clients remembering new texts (REST, one call after another) and ``--recallers`` clients
recalling, for ``--seconds``, on the same server:

- ``one client``: one rememberer alone (no recallers): the floor of a remember;
- ``quiet``: the full load, nobody else on the table;
- ``plugin lock 7 s``: memory-lancedb-pro's write lock (its directory) is taken for 7 s in the middle;
- ``committer 0.1 s``: another process commits every 0.1 s under that lock (appends, updates, deletes),
  as the plugin does;
- ``cpu hog``: one process spinning on each core;
- ``appender 0.1 s``: another process appends a row every 0.1 s without any lock.

Printed per phase: remember p50/p99 and refused (any non-2xx), recall p50/p99, the journal write's own
p50 (the server's ``/readyz``: the time inside the journal append, group commit included) and its share
of the remember p50; then the targets of the write journal (issue 43) judged on the ratios to ``quiet``.
Results go to ``bench/results/writes.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx

from app.memory.embeddings.registry import create_embedder
from app.memory.store.locks import LOCK_DIR_NAME
from app.settings import Settings
from bench.data import textgen
from bench.data.corpus import bulk_load, corpus
from bench.shared_table import _ratio, _recaller, _rememberer, _summary
from bench.support import server as srv
from bench.support.common import CachingEmbedder, VectorCache, machine_info, print_table, write_json

TARGETS = {"plugin_lock_remember_p99_ms": 1000.0, "committer_remember_p99_vs_quiet": 1.5,
           "appender_recall_p99_vs_quiet": 1.5, "refused": 0}
LOCK_HELD_S = 7.0
PHASES = ("one client", "quiet", "plugin lock 7 s", "committer 0.1 s", "cpu hog", "appender 0.1 s")


@contextlib.contextmanager
def plugin_lock(db: Path, after_s: float) -> Iterator[None]:
    """Take the plugin's lock directory ``after_s`` into the phase, for ``LOCK_HELD_S``."""
    stop = threading.Event()

    def hold() -> None:
        if stop.wait(after_s):
            return
        while True:
            try:
                os.mkdir(db / LOCK_DIR_NAME)
                break
            except FileExistsError:  # our flusher holds it: the plugin retries, as proper-lockfile does
                time.sleep(0.01)
        stop.wait(LOCK_HELD_S)
        os.rmdir(db / LOCK_DIR_NAME)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(LOCK_HELD_S + 5)


@contextlib.contextmanager
def child(*argv: str) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen([sys.executable, *argv], cwd=srv.REPO, stdout=subprocess.DEVNULL)
    try:
        yield process
    finally:
        process.terminate()
        process.wait(20)


def appender(db: str, seconds: float, tick_s: float) -> int:
    """Append a row every ``tick_s`` without any lock, as a writer that ignores it would."""
    import lancedb
    import numpy as np

    table = lancedb.connect(db).open_table("memories")
    dimension = table.schema.field("vector").type.list_size
    start = time.monotonic()
    tick = 0
    while time.monotonic() - start < seconds:
        vector = np.random.default_rng(tick).standard_normal(dimension).astype(np.float32)
        table.add([{"id": str(uuid.uuid4()), "text": f"appended without a lock {tick}", "vector": vector.tolist(),
                    "scope": "global", "category": "fact", "importance": 0.5, "timestamp": int(time.time() * 1000),
                    "metadata": "{}"}])
        tick += 1
        time.sleep(max(0.0, start + tick * tick_s - time.monotonic()))  # the writer's pace, not a sync
    return 0


async def _journal(url: str) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=30, trust_env=False) as http:
        journal: dict[str, Any] = (await http.get(f"{url}/readyz")).json()["memory"]["journal"]
        return journal


async def run_phase(name: str, url: str, db: Path, pool: Path, args: argparse.Namespace,
                    texts: list[str]) -> dict[str, Any]:
    recall: list[tuple[float, float]] = []
    remember: list[tuple[float, float]] = []
    recall_errors: list[Any] = [0]
    remember_errors: list[Any] = [0]
    clients, recallers = (1, 0) if name == "one client" else (args.clients, args.recallers)
    queries = textgen.queries(200)
    with contextlib.ExitStack() as stack:
        if name.startswith("plugin lock"):
            stack.enter_context(plugin_lock(db, (args.seconds - LOCK_HELD_S) / 2))
        elif name.startswith("committer"):
            stack.enter_context(child("-m", "bench.shared_table", "--foreign-writer", str(db), str(pool),
                                      str(args.seconds), "0.1", ""))
        elif name == "cpu hog":
            for _ in range(os.cpu_count() or 2):
                stack.enter_context(child("-c", "while True: pass"))
        elif name.startswith("appender"):
            stack.enter_context(child("-m", "bench.writes", "--appender", str(db), str(args.seconds), "0.1"))
        stop_at = time.monotonic() + args.seconds
        await asyncio.gather(
            *(_recaller(url, queries[i::max(recallers, 1)], stop_at, recall, recall_errors) for i in range(recallers)),
            *(_rememberer(url, texts, stop_at, remember, remember_errors) for _ in range(clients)))
    journal = await _journal(url)
    return {"remember": _summary([t for _, t in remember]), "recall": _summary([t for _, t in recall]),
            "refused": remember_errors[0], "recall_errors": recall_errors[0],
            "first_errors": remember_errors[1:] + recall_errors[1:], "journal_append": journal.get("append", {})}


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    inner = create_embedder(Settings(embedding_provider=args.provider))
    embedder = CachingEmbedder(inner, VectorCache(inner.identity, Path(args.cache_dir) if args.cache_dir else None))
    await embedder.load()
    payload: dict[str, Any] = {"machine": machine_info(), "targets": TARGETS, "model": embedder.identity,
                               "load": {"rows": args.rows, "clients": args.clients, "recallers": args.recallers,
                                        "seconds": args.seconds}, "phases": {}}
    with tempfile.TemporaryDirectory(prefix="bench-writes-") as tmp:
        db = Path(tmp) / "lancedb"
        db.parent.mkdir(exist_ok=True)
        payload["bulk_load"] = bulk_load(db, await corpus(embedder, args.rows), embedder)
        pool = Path(tmp) / "pool.json"
        pool_texts = textgen.sentences(int(args.seconds / 0.1) + 50, seed=41)
        pool.write_text(json.dumps(pool_texts))
        import numpy as np

        from bench.support.common import embed_cached
        np.save(str(pool) + ".npy", await embed_cached(embedder, pool_texts))
        texts = textgen.sentences(int(args.seconds * 3000), seed=43)
        with srv.serve(db, Path(tmp) / "server.log", provider=args.provider) as server:
            await _recaller(server.url, textgen.queries(5), time.monotonic() + 1.0, [], [0])  # warm up
            for name in PHASES:
                payload["phases"][name] = await run_phase(name, server.url, db, pool, args, texts)
                print(f"{name}: done", flush=True)
    await embedder.close()
    payload["judged"] = judge(payload["phases"])
    return payload


def judge(phases: dict[str, Any]) -> dict[str, Any]:
    quiet = phases["quiet"]
    figures = {
        "plugin_lock_remember_p99_ms": phases["plugin lock 7 s"]["remember"]["p99_ms"],
        "committer_remember_p99_vs_quiet": _ratio(phases["committer 0.1 s"]["remember"]["p99_ms"],
                                                  quiet["remember"]["p99_ms"]),
        "appender_recall_p99_vs_quiet": _ratio(phases["appender 0.1 s"]["recall"]["p99_ms"], quiet["recall"]["p99_ms"]),
        "refused": sum(phase["refused"] for phase in phases.values()),
    }
    return {key: {"measured": value, "target": TARGETS[key], "met": value <= TARGETS[key]}
            for key, value in figures.items()}


def report(payload: dict[str, Any]) -> None:
    rows = []
    for name, phase in payload["phases"].items():
        append = phase["journal_append"].get("p50_ms")
        share = round(append / phase["remember"]["p50_ms"], 2) if append and phase["remember"]["p50_ms"] else "-"
        rows.append([name, phase["remember"]["p50_ms"], phase["remember"]["p99_ms"], phase["remember"]["n"],
                     phase["refused"], phase["recall"]["p50_ms"], phase["recall"]["p99_ms"], append, share])
    load = payload["load"]
    print_table(f"Writes at {load['rows']:,} rows, {load['clients']} rememberers + {load['recallers']} recallers, "
                f"{load['seconds']:.0f} s a phase (ms)",
                ["phase", "remember p50", "p99", "n", "refused", "recall p50", "p99", "journal p50", "share"], rows)
    print_table("Targets", ["target", "measured", "goal", "met"],
                [[key, v["measured"], v["target"], v["met"]] for key, v in payload["judged"].items()])


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000, help="memories in the table")
    parser.add_argument("--clients", type=int, default=32, help="concurrent remember clients")
    parser.add_argument("--recallers", type=int, default=4, help="concurrent recall clients")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each phase (>= 8 for the lock phase)")
    parser.add_argument("--provider", default="hash", help="embedding provider")
    parser.add_argument("--cache-dir", default=None, help="vector cache directory (default bench/cache)")
    parser.add_argument("--results-dir", default=None, help="where the JSON goes (default bench/results)")
    parser.add_argument("--output", default="writes", help="result file name (no .json)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    payload = asyncio.run(main_async(args))
    report(payload)
    print(f"\nwrote {write_json(args.output, payload, Path(args.results_dir) if args.results_dir else None)}")
    return payload


if __name__ == "__main__":
    if sys.argv[1:2] == ["--appender"]:
        sys.exit(appender(sys.argv[2], float(sys.argv[3]), float(sys.argv[4])))
    main()
