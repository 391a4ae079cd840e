"""Recall and remember while another process writes the same table, against the same load on a quiet one.

    python -m bench.shared_table                              # 10k, 50k, 100k with the local model
    python -m bench.shared_table --sizes 10000 --provider hash --seconds 10
    python -m bench.shared_table --sizes 100000 --interval 0.1 --compact  # a commit every 0.1 s, one compaction

Per size, the speed benchmark's memories are bulk-loaded and served by a real server process (``python
-m app.cli serve``). Two phases of ``--seconds`` each run the same load: ``--recallers`` clients
recalling one query after another (REST vector search) and ``--rememberers`` clients remembering new
texts. In the second, another OS process, modelled on OpenClaw's memory-lancedb-pro, writes the table
directly with LanceDB under the lock it takes: every ``--interval`` seconds (0.5) it commits one change,
in turn appending a memory, updating one (its importance, or its text and vector) and deleting one;
halfway through it appends 100 in a burst, and with ``--compact`` it compacts the table once, a quarter
of the way in. Each row it appends on the beat, and the burst's last, is recalled by its text until it
comes back: the time from its commit to that answer is how long a foreign row takes to become recallable
(probing all hundred at once would measure the probes' own load). Printed: recall and remember p50/p99
per phase and the ratios shared / quiet, that time's p50/p99, and errors. Results go to
``bench/results/shared_table.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import numpy as np

from app.memory.embeddings.registry import create_embedder
from app.settings import Settings
from bench.data import textgen
from bench.data.corpus import bulk_load, corpus
from bench.support import server as srv
from bench.support.common import (
    CachingEmbedder,
    VectorCache,
    embed_cached,
    machine_info,
    percentile,
    print_table,
    write_json,
)
from bench.support.server import RawConnection

TARGETS = {"recall_p99_vs_quiet": 3.0, "recall_p99_ms": 150.0, "remember_p99_ms": 500.0,
           "recallable_p99_s": 1.0, "errors": 0}
TICK_S = 0.5  # between the other process's commits
BURST = 100
RECALLABLE_TIMEOUT_S = 10.0
K = 10


# --- the other process -------------------------------------------------------------------------------

def foreign_writer(db: str, pool_path: str, seconds: float, tick_s: float = TICK_S, compact: bool = False) -> int:
    """Write the table like memory-lancedb-pro for ``seconds``; one JSON line per append on stdout."""
    import lancedb

    from app.memory.store.commits import is_retryable
    from app.memory.store.locks import WriteLock

    pool = json.loads(Path(pool_path).read_text())
    vectors = np.load(pool_path + ".npy")
    table = lancedb.connect(db).open_table("memories")
    lock = WriteLock(Path(db), timeout_s=60)
    existing = table.search().select(["id"]).limit(None).to_arrow()["id"].to_pylist()
    rng = random.Random(7)  # noqa: S311 - a workload, not a secret
    victims = rng.sample(existing, min(len(existing), int(seconds / tick_s) + 10))
    victim = iter(victims * 2)
    counts = {"append": 0, "update": 0, "delete": 0, "compact": 0, "errors": 0}
    held: dict[str, list[float]] = {kind: [] for kind in counts}
    used = 0

    def commit(kind: str, change: Any) -> None:
        for attempt in range(8):
            try:
                with lock.hold():
                    taken = time.perf_counter()
                    change()
                    held[kind].append(time.perf_counter() - taken)
                counts[kind] += 1
                return
            except Exception as exc:  # noqa: BLE001 - counted; the benchmark reports it
                if attempt == 7 or not is_retryable(exc):
                    counts["errors"] += 1
                    print(json.dumps({"error": f"{kind}: {exc}"}), flush=True)
                    return
            time.sleep(0.02 * 2**attempt)  # back-off outside the lock, as the plugin's retries do

    def append(probe: bool = True) -> None:
        nonlocal used
        text, vector = pool[used % len(pool)], vectors[used % len(pool)]
        used += 1
        row = {"id": str(uuid.uuid4()), "text": text, "vector": vector.tolist(), "scope": "global",
               "category": "fact", "importance": 0.7, "timestamp": int(time.time() * 1000),
               "metadata": json.dumps({"source": "memory-lancedb-pro"})}
        commit("append", lambda: table.add([row]))
        print(json.dumps({"id": row["id"], "text": text, "t": time.time(), "probe": probe}), flush=True)

    print(json.dumps({"ready": True}), flush=True)
    start = time.monotonic()
    tick, burst_done = 0, False
    while time.monotonic() - start < seconds:
        kind = ("append", "update", "delete")[tick % 3]  # one commit a beat
        if kind == "append":
            append()
        elif kind == "update":
            if tick % 2:
                values: dict[str, Any] = {"importance": round(rng.random(), 3)}
            else:
                values = {"text": pool[(used + 7) % len(pool)], "vector": vectors[(used + 7) % len(pool)].tolist()}
            target = next(victim)
            commit("update", lambda t=target, v=values: table.update(where=f"id = '{t}'", values=v))
        else:
            doomed = next(victim)
            commit("delete", lambda t=doomed: table.delete(f"id = '{t}'"))
        if compact and not counts["compact"] and time.monotonic() - start >= seconds / 4:
            commit("compact", lambda: table.optimize())  # as the plugin's index fold does, under its lock
        if not burst_done and time.monotonic() - start >= seconds / 2:
            burst_done = True
            burst_start = time.time()
            for i in range(BURST):
                append(probe=i == BURST - 1)  # the burst is recallable when its last row is
            print(json.dumps({"burst": [burst_start, time.time()]}), flush=True)
        tick += 1
        time.sleep(max(0.0, start + tick * tick_s - time.monotonic()))  # the plugin's pace, not a sync
    elapsed = time.monotonic() - start
    print(json.dumps({"done": counts, "held_ms": {k: {"p50": round(percentile([v * 1000 for v in h], 50), 1),
                                                     "max": round(max(h) * 1000, 1)} for k, h in held.items() if h},
                      "lock_share": round(sum(map(sum, held.values())) / elapsed, 3)}), flush=True)
    return 0


# --- the load ----------------------------------------------------------------------------------------

Timed = list[tuple[float, float]]  # (wall clock when answered, latency in seconds)


async def _recaller(url: str, queries: list[str], stop_at: float, latencies: Timed, errors: list[Any]) -> None:
    connection = await RawConnection.open(url)
    try:
        i = 0
        while time.monotonic() < stop_at:
            path = f"/api/lancedb/vector-search?{urlencode({'q': queries[i % len(queries)], 'limit': K})}"
            started = time.perf_counter()
            status, body = await connection.request("GET", path)
            latencies.append((time.time(), time.perf_counter() - started))
            _count_error(errors, status, body)
            i += 1
    finally:
        await connection.close()


async def _rememberer(url: str, texts: list[str], stop_at: float, latencies: Timed, errors: list[Any]) -> None:
    connection = await RawConnection.open(url)
    try:
        while texts and time.monotonic() < stop_at:
            started = time.perf_counter()
            body = {"text": texts.pop(), "category": "bench"}
            status, answer = await connection.request("POST", "/api/lancedb/memories", body)
            latencies.append((time.time(), time.perf_counter() - started))
            _count_error(errors, status, answer)
    finally:
        await connection.close()


def _count_error(errors: list[Any], status: int, body: bytes) -> None:
    """``errors``: [count, the first error's status and body]."""
    if not 200 <= status < 300:
        errors[0] += 1
        if len(errors) == 1:
            errors.append(f"{status} {body[:300].decode(errors='replace')}")


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
        sys.executable, "-m", "bench.shared_table", "--foreign-writer", str(db), str(pool), str(args.seconds),
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
    loads = [*(_recaller(url, queries[i :: args.recallers], stop_at, recall, recall_errors)
               for i in range(args.recallers)),
             *(_rememberer(url, texts, stop_at, remember, remember_errors) for _ in range(args.rememberers))]
    if foreign is None:
        await asyncio.gather(*loads)
        other: dict[str, Any] = {}
    else:
        *_, other = await asyncio.gather(*loads, _foreign(*foreign, args, url))
    out = {"recall": _summary([t for _, t in recall]), "remember": _summary([t for _, t in remember]),
           "errors": recall_errors[0] + remember_errors[0] + len(other.get("writer_errors", [])) +
           other.get("never_recallable", 0),
           "first_errors": recall_errors[1:] + remember_errors[1:] + other.get("writer_errors", [])[:1]}
    if other:
        out["foreign"] = {**{k: v for k, v in other.items() if k != "recallable_s"},
                          "recallable": _summary(other["recallable_s"], scale=1.0, unit="s")}
        if other["burst"]:  # what the burst of appends costs, apart from the rest of the phase
            start, end = other["burst"]
            for name, calls in (("recall", recall), ("remember", remember)):
                out[f"{name}_outside_burst"] = _summary([t for done, t in calls if done < start or done - t > end])
    return out


def _summary(values: Sequence[float], scale: float = 1000.0, unit: str = "ms") -> dict[str, Any]:
    scaled = [v * scale for v in values]
    return {f"p50_{unit}": round(percentile(scaled, 50), 3), f"p99_{unit}": round(percentile(scaled, 99), 3),
            f"max_{unit}": round(max(scaled), 3) if scaled else float("nan"), "n": len(scaled)}


async def run_size(size: int, embedder: CachingEmbedder, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    data = await corpus(embedder, size)
    pool_texts = textgen.sentences(int(args.seconds / args.interval) + BURST + 20, seed=size + 29)
    pool = tmp / f"pool-{size}.json"
    pool.write_text(json.dumps(pool_texts))
    np.save(str(pool) + ".npy", await embed_cached(embedder, pool_texts))
    db = tmp / f"size-{size}" / "lancedb"
    db.parent.mkdir(parents=True)
    loaded = bulk_load(db, data, embedder)
    texts = textgen.sentences(int(args.seconds * 400), seed=size + 31)
    with srv.serve(db, db.parent / "server.log", provider=args.provider) as server:
        await _recaller(server.url, textgen.queries(5), time.monotonic() + 1.0, [], [0])  # warm the server
        quiet = await phase(server.url, args, texts, None)
        shared = await phase(server.url, args, texts, (db, pool))
        rss_mb = round(server.rss_mb(), 1)
    return {"size": size, "bulk_load": loaded, "quiet": quiet, "shared": shared, "rss_end_mb": rss_mb,
            "ratios": {"recall_p99": _ratio(shared["recall"]["p99_ms"], quiet["recall"]["p99_ms"]),
                       "recall_p50": _ratio(shared["recall"]["p50_ms"], quiet["recall"]["p50_ms"]),
                       "remember_p99": _ratio(shared["remember"]["p99_ms"], quiet["remember"]["p99_ms"]),
                       "remember_p50": _ratio(shared["remember"]["p50_ms"], quiet["remember"]["p50_ms"])}}


def _ratio(a: float, b: float) -> float:
    return round(a / b, 2) if b else float("nan")


def report(payload: dict[str, Any]) -> None:
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


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    inner = create_embedder(Settings(embedding_provider=args.provider))
    embedder = CachingEmbedder(inner, VectorCache(inner.identity, Path(args.cache_dir) if args.cache_dir else None))
    await embedder.load()
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


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,50000,100000", help="table sizes, comma-separated")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of each phase")
    parser.add_argument("--recallers", type=int, default=2, help="concurrent recall clients")
    parser.add_argument("--rememberers", type=int, default=4, help="concurrent remember clients")
    parser.add_argument("--provider", default="local", help="embedding provider (hash for a quick run)")
    parser.add_argument("--interval", type=float, default=TICK_S, help="seconds between the other process's writes")
    parser.add_argument("--compact", action="store_true", help="the other process also compacts the table once")
    parser.add_argument("--cache-dir", default=None, help="vector cache directory (default bench/cache)")
    parser.add_argument("--results-dir", default=None, help="where the JSON goes (default bench/results)")
    parser.add_argument("--output", default="shared_table", help="result file name (no .json)")
    args = parser.parse_args(argv)
    args.sizes = sorted(int(s) for s in str(args.sizes).split(",") if s.strip())
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    payload = asyncio.run(main_async(args))
    report(payload)
    print(f"\nwrote {write_json(args.output, payload, Path(args.results_dir) if args.results_dir else None)}")
    return payload


if __name__ == "__main__":
    if sys.argv[1:2] == ["--foreign-writer"]:
        sys.exit(foreign_writer(sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5]),
                                sys.argv[6:7] == ["compact"]))
    main()
