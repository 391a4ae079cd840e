"""Sharing the table: recall and remember while other processes write it, and what they do to a write.

    python -m bench.sharing                   # both parts, each with its defaults
    python -m bench.sharing other-writer      # 10k, 50k, 100k with the local model
    python -m bench.sharing other-writer --sizes 10000 --provider hash --seconds 10
    python -m bench.sharing other-writer --sizes 100000 --interval 0.1 --compact  # a commit every 0.1 s, a compaction
    python -m bench.sharing write-path        # 100k rows, hash embedder, 32 clients, 10 s phases
    python -m bench.sharing write-path --rows 10000 --seconds 8                   # a quick look

Both parts bulk-load the speed benchmark's memories and serve them with a real server process (``python
-m app.cli serve``); clients recall (REST vector search, one query after another) and remember new texts.

``other-writer``: two phases of ``--seconds`` each run the same load, ``--recallers`` and ``--rememberers``
clients. In the second, another OS process, modelled on OpenClaw's memory-lancedb-pro, writes the table
directly with LanceDB under the lock it takes: every ``--interval`` seconds (0.5) it commits one change,
in turn appending a memory, updating one (its importance, or its text and vector) and deleting one;
halfway through it appends 100 in a burst, and with ``--compact`` it compacts the table once, a quarter
of the way in. Each row it appends on the beat, and the burst's last, is recalled by its text until it
comes back: the time from its commit to that answer is how long a foreign row takes to become recallable
(probing all hundred at once would measure the probes' own load). Printed: recall and remember p50/p99
per phase and the ratios shared / quiet, that time's p50/p99, and errors. Results go to
``bench/results/shared_table.json``.

``write-path``: each phase runs ``--clients`` rememberers and ``--recallers`` recallers for ``--seconds``
on the same server (``--rows`` memories):

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
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import numpy as np

from bench.data import textgen
from bench.data.corpus import bulk_load, corpus
from bench.support import neighbours
from bench.support import server as srv
from bench.support.common import (
    CachingEmbedder,
    caching_embedder,
    embed_cached,
    machine_info,
    measure_and_write,
    output_options,
    print_table,
    ratio,
    spread,
)
from bench.support.neighbours import BURST
from bench.support.server import RawConnection, Timed, recaller, rememberer

TARGETS = {"recall_p99_vs_quiet": 3.0, "recall_p99_ms": 150.0, "remember_p99_ms": 500.0,
           "recallable_p99_s": 1.0, "errors": 0}
WRITE_TARGETS = {"plugin_lock_remember_p99_ms": 1000.0, "committer_remember_p99_vs_quiet": 1.5,
                 "appender_recall_p99_vs_quiet": 1.5, "refused": 0}
TICK_S = 0.5  # between the other process's commits
RECALLABLE_TIMEOUT_S = 10.0
K = 10
LOCK_HELD_S = 7.0
PHASES = ("one client", "quiet", "plugin lock 7 s", "committer 0.1 s", "cpu hog", "appender 0.1 s")


def _pool(path: Path, texts: list[str], vectors: np.ndarray) -> Path:
    """The texts the foreign writer appends (``path``) and their vectors (``path.npy``)."""
    path.write_text(json.dumps(texts))
    np.save(str(path) + ".npy", vectors)
    return path


# --- other-writer: a quiet phase, then one beside the plugin's commits -----------------------------

async def _recallable(url: str, memory_id: str, text: str, committed: float) -> float | None:
    """Seconds from the foreign commit until a recall of its text returns the row; None if never."""
    connection = await RawConnection.open(url)
    try:
        while time.time() - committed < RECALLABLE_TIMEOUT_S:
            path = f"/api/lancedb/vector-search?{urlencode({'q': text, 'limit': K})}"
            status, body = await connection.request("GET", path)
            hits = json.loads(body) if status == 200 else []
            if any(memory_id == h["id"] or memory_id in (h.get("duplicate_ids") or []) for h in hits):
                return time.time() - committed
            await asyncio.sleep(0.02)  # polls the server; the wait itself is what is measured
        return None
    finally:
        await connection.close()


async def _foreign(db: Path, pool: Path, args: argparse.Namespace, url: str) -> dict[str, Any]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.support.neighbours", "foreign-writer", str(db), str(pool), str(args.seconds),
        str(args.interval), "compact" if args.compact else "", stdout=asyncio.subprocess.PIPE, cwd=srv.REPO)
    assert process.stdout is not None  # noqa: S101 - PIPE was asked for
    probes: list[asyncio.Task[float | None]] = []
    done: dict[str, int] = {}
    held: dict[str, Any] = {}
    share = 0.0
    burst: list[float] = []
    committed: list[float] = []
    errors: list[str] = []
    while line := await process.stdout.readline():
        event = json.loads(line)
        if event.get("probe"):
            probes.append(asyncio.create_task(_recallable(url, event["id"], event["text"], event["t"])))
            committed.append(event["t"])
        done = event.get("done", done)
        held = event.get("held_ms", held)
        share = event.get("lock_share", share)
        burst = event.get("burst", burst)
        errors += [event["error"]] if "error" in event else []
    await process.wait()
    waits = await asyncio.gather(*probes)
    slowest = sorted(((w, t) for w, t in zip(waits, committed, strict=True) if w is not None), reverse=True)[:3]
    return {"writes": done, "held_ms": held, "lock_share": share, "burst": burst, "writer_errors": errors,
            "recallable_s": [w for w in waits if w is not None], "never_recallable": sum(w is None for w in waits),
            "slowest_recallable": [{"s": round(w, 3), "committed_s_after_burst_start": round(t - burst[0], 3)
                                    if burst else None} for w, t in slowest]}


async def phase(url: str, args: argparse.Namespace, texts: list[str],
                foreign: tuple[Path, Path] | None) -> dict[str, Any]:
    """One phase of recall and remember load, with the foreign writer when ``foreign`` is given."""
    recall: Timed = []
    remember: Timed = []
    recall_errors: list[Any] = [0]
    remember_errors: list[Any] = [0]
    queries = textgen.queries(200)
    stop_at = time.monotonic() + args.seconds
    loads = [*(recaller(url, queries[i :: args.recallers], stop_at, recall, recall_errors)
               for i in range(args.recallers)),
             *(rememberer(url, texts, stop_at, remember, remember_errors) for _ in range(args.rememberers))]
    if foreign is None:
        await asyncio.gather(*loads)
        other: dict[str, Any] = {}
    else:
        *_, other = await asyncio.gather(*loads, _foreign(*foreign, args, url))
    out = {"recall": spread([t for _, t in recall]), "remember": spread([t for _, t in remember]),
           "errors": recall_errors[0] + remember_errors[0] + len(other.get("writer_errors", [])) +
           other.get("never_recallable", 0),
           "first_errors": recall_errors[1:] + remember_errors[1:] + other.get("writer_errors", [])[:1]}
    if other:
        out["foreign"] = {**{k: v for k, v in other.items() if k != "recallable_s"},
                          "recallable": spread(other["recallable_s"], unit="s")}
        if other["burst"]:  # what the burst of appends costs, apart from the rest of the phase
            start, end = other["burst"]
            for name, calls in (("recall", recall), ("remember", remember)):
                out[f"{name}_outside_burst"] = spread([t for done, t in calls if done < start or done - t > end])
    return out


async def run_size(size: int, embedder: CachingEmbedder, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    data = await corpus(embedder, size)
    pool_texts = textgen.sentences(int(args.seconds / args.interval) + BURST + 20, seed=size + 29)
    pool = _pool(tmp / f"pool-{size}.json", pool_texts, await embed_cached(embedder, pool_texts))
    db = tmp / f"size-{size}" / "lancedb"
    db.parent.mkdir(parents=True)
    loaded = bulk_load(db, data, embedder)
    texts = textgen.sentences(int(args.seconds * 400), seed=size + 31)
    with srv.serve(db, db.parent / "server.log", provider=args.provider) as server:
        await recaller(server.url, textgen.queries(5), time.monotonic() + 1.0, [], [0])  # warm the server
        quiet = await phase(server.url, args, texts, None)
        shared = await phase(server.url, args, texts, (db, pool))
        rss_mb = round(server.rss_mb(), 1)
    return {"size": size, "bulk_load": loaded, "quiet": quiet, "shared": shared, "rss_end_mb": rss_mb,
            "ratios": {"recall_p99": ratio(shared["recall"]["p99_ms"], quiet["recall"]["p99_ms"]),
                       "recall_p50": ratio(shared["recall"]["p50_ms"], quiet["recall"]["p50_ms"]),
                       "remember_p99": ratio(shared["remember"]["p99_ms"], quiet["remember"]["p99_ms"]),
                       "remember_p50": ratio(shared["remember"]["p50_ms"], quiet["remember"]["p50_ms"])}}


def report_other_writer(payload: dict[str, Any]) -> None:
    sizes = payload["sizes"]
    cols = ["metric", *(f"{s['size']:,}" for s in sizes)]

    def row(label: str, get: Any) -> list[Any]:
        return [label, *(get(s) for s in sizes)]

    rows = []
    for name in ("quiet", "shared"):
        for op in ("recall", "remember"):
            rows += [row(f"{op} p50 ms ({name})", lambda s, n=name, o=op: s[n][o]["p50_ms"]),
                     row(f"{op} p99 ms ({name})", lambda s, n=name, o=op: s[n][o]["p99_ms"])]
    rows += [row(f"{op} p99 ms (shared, outside the burst)",
                 lambda s, o=op: s["shared"][f"{o}_outside_burst"]["p99_ms"]) for op in ("recall", "remember")]
    rows += [row(f"{op} {q} shared / quiet", lambda s, k=f"{op}_{q}": s["ratios"][k])
             for op in ("recall", "remember") for q in ("p50", "p99")]
    rows += [row("foreign row recallable p50 s", lambda s: s["shared"]["foreign"]["recallable"]["p50_s"]),
             row("foreign row recallable p99 s", lambda s: s["shared"]["foreign"]["recallable"]["p99_s"]),
             row("burst of appends s", lambda s: round(s["shared"]["foreign"]["burst"][1]
                                                      - s["shared"]["foreign"]["burst"][0], 2)),
             row("foreign appends / updates / deletes / compactions", lambda s: "/".join(
                 str(s["shared"]["foreign"]["writes"].get(k, 0)) for k in ("append", "update", "delete", "compact"))),
             row("other process: share of time holding the lock", lambda s: s["shared"]["foreign"]["lock_share"]),
             row("recalls (quiet / shared)", lambda s: _pair(s, "recall", "n")),
             row("remembers (quiet / shared)", lambda s: _pair(s, "remember", "n")),
             row("errors (quiet / shared)", lambda s: f"{s['quiet']['errors']}/{s['shared']['errors']}"),
             row("server RSS at the end MB", lambda s: s["rss_end_mb"])]
    print_table("One table, two writers (latencies in ms)", cols, rows)


def _pair(size: dict[str, Any], op: str, key: str) -> str:
    return f"{size['quiet'][op][key]}/{size['shared'][op][key]}"


async def other_writer(args: argparse.Namespace) -> dict[str, Any]:
    embedder = await caching_embedder(args.provider, args.cache_dir)
    payload: dict[str, Any] = {"machine": machine_info(), "targets": TARGETS, "model": embedder.identity,
                               "load": {"recallers": args.recallers, "rememberers": args.rememberers,
                                        "seconds": args.seconds, "tick_s": args.interval, "burst": BURST,
                                        "foreign_compaction": args.compact}, "sizes": []}
    with tempfile.TemporaryDirectory(prefix="bench-shared-") as tmp:
        for size in args.sizes:
            started = time.perf_counter()
            payload["sizes"].append(await run_size(size, embedder, args, Path(tmp)))
            print(f"size {size:,}: done in {time.perf_counter() - started:.0f} s", flush=True)
    await embedder.close()
    return payload


# --- write-path: the phases of the write journal's targets -----------------------------------------

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
            stack.enter_context(neighbours.plugin_lock(db, (args.seconds - LOCK_HELD_S) / 2, LOCK_HELD_S))
        elif name.startswith("committer"):
            stack.enter_context(neighbours.child("-m", "bench.support.neighbours", "foreign-writer", str(db),
                                                 str(pool), str(args.seconds), "0.1", ""))
        elif name == "cpu hog":
            for _ in range(os.cpu_count() or 2):
                stack.enter_context(neighbours.child("-c", "while True: pass"))
        elif name.startswith("appender"):
            stack.enter_context(neighbours.child("-m", "bench.support.neighbours", "appender", str(db),
                                                 str(args.seconds), "0.1"))
        stop_at = time.monotonic() + args.seconds
        await asyncio.gather(
            *(recaller(url, queries[i::max(recallers, 1)], stop_at, recall, recall_errors) for i in range(recallers)),
            *(rememberer(url, texts, stop_at, remember, remember_errors) for _ in range(clients)))
    journal = await _journal(url)
    return {"remember": spread([t for _, t in remember]), "recall": spread([t for _, t in recall]),
            "refused": remember_errors[0], "recall_errors": recall_errors[0],
            "first_errors": remember_errors[1:] + recall_errors[1:], "journal_append": journal.get("append", {})}


async def write_path(args: argparse.Namespace) -> dict[str, Any]:
    embedder = await caching_embedder(args.provider, args.cache_dir)
    payload: dict[str, Any] = {"machine": machine_info(), "targets": WRITE_TARGETS, "model": embedder.identity,
                               "load": {"rows": args.rows, "clients": args.clients, "recallers": args.recallers,
                                        "seconds": args.seconds}, "phases": {}}
    with tempfile.TemporaryDirectory(prefix="bench-writes-") as tmp:
        db = Path(tmp) / "lancedb"
        db.parent.mkdir(exist_ok=True)
        payload["bulk_load"] = bulk_load(db, await corpus(embedder, args.rows), embedder)
        pool_texts = textgen.sentences(int(args.seconds / 0.1) + 50, seed=41)
        pool = _pool(Path(tmp) / "pool.json", pool_texts, await embed_cached(embedder, pool_texts))
        texts = textgen.sentences(int(args.seconds * 3000), seed=43)
        with srv.serve(db, Path(tmp) / "server.log", provider=args.provider) as server:
            await recaller(server.url, textgen.queries(5), time.monotonic() + 1.0, [], [0])  # warm up
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
        "committer_remember_p99_vs_quiet": ratio(phases["committer 0.1 s"]["remember"]["p99_ms"],
                                                 quiet["remember"]["p99_ms"]),
        "appender_recall_p99_vs_quiet": ratio(phases["appender 0.1 s"]["recall"]["p99_ms"], quiet["recall"]["p99_ms"]),
        "refused": sum(phase["refused"] for phase in phases.values()),
    }
    return {key: {"measured": value, "target": WRITE_TARGETS[key], "met": value <= WRITE_TARGETS[key]}
            for key, value in figures.items()}


def report_write_path(payload: dict[str, Any]) -> None:
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
    parts = parser.add_subparsers(dest="part", metavar="{other-writer,write-path}", help="without one: both")
    other = parts.add_parser("other-writer", help="a quiet phase, then one beside a foreign writer's commits")
    other.add_argument("--sizes", default="10000,50000,100000", help="table sizes, comma-separated")
    other.add_argument("--seconds", type=float, default=30.0, help="length of each phase")
    other.add_argument("--recallers", type=int, default=2, help="concurrent recall clients")
    other.add_argument("--rememberers", type=int, default=4, help="concurrent remember clients")
    other.add_argument("--provider", default="local", help="embedding provider (hash for a quick run)")
    other.add_argument("--interval", type=float, default=TICK_S, help="seconds between the other process's writes")
    other.add_argument("--compact", action="store_true", help="the other process also compacts the table once")
    output_options(other, "shared_table")
    write = parts.add_parser("write-path", help="remember beside the plugin's lock, a committer, CPU hogs, an appender")
    write.add_argument("--rows", type=int, default=100_000, help="memories in the table")
    write.add_argument("--clients", type=int, default=32, help="concurrent remember clients")
    write.add_argument("--recallers", type=int, default=4, help="concurrent recall clients")
    write.add_argument("--seconds", type=float, default=10.0, help="length of each phase (>= 8 for the lock phase)")
    write.add_argument("--provider", default="hash", help="embedding provider")
    output_options(write, "writes")
    args = parser.parse_args(argv)
    if args.part == "other-writer":
        args.sizes = sorted(int(s) for s in str(args.sizes).split(",") if s.strip())
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.part is None:  # both parts, each with its own defaults
        return {part: main([part]) for part in ("other-writer", "write-path")}
    if args.part == "other-writer":
        return measure_and_write(args, other_writer, report_other_writer)
    return measure_and_write(args, write_path, report_write_path)


if __name__ == "__main__":
    main()
