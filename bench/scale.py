"""Scale: start-up after a restart, recall while starting, recall p50/p99, RSS, at 10k / 100k / 1M rows.

```
nice -n 10 .venv/bin/python -m bench.scale                          # 10k, 100k, 1M; the local model
.venv/bin/python -m bench.scale --sizes 10000 --provider hash --queries 20
.venv/bin/python -m bench.scale --sizes 1000000 --data-dir /var/tmp/scale   # keep the tables for a rerun
```

Per size: a table of random unit vectors (in the provider's schema: start-up, search and memory do
not care what the vectors mean) is written with LanceDB directly; a server starts on it (loading
the vector cache from the table, and saving its index), stops cleanly, and starts again. Printed:

- ``first ready s``: spawn to ``/readyz`` 200 on the first start (no saved index: the cache is read
  from the table, and saved at the stop);
- ``ready s``: the same after the restart (the cache restored from its saved index);
- ``slowest recall while starting``: REST recalls sent one after another from the restart's first
  ``/healthz`` until ``/readyz`` is 200 (``n`` of them; a 503 ``starting`` counts as answered; the JSON
  also has the slowest 503 alone, ``slowest_refusal_while_starting_ms``);
- ``recall p50/p99``: REST ``vector-search`` once ready (embedding the query included);
- ``numpy p50``: an exact float32 scan (``q . M^T`` and a top-10 partial sort) over the same vectors in
  this process, and ``ratio`` = recall p50 / numpy p50;
- ``RSS MB``: the server and its children (the local model's process) once the recalls are done; the
  JSON also splits the server's into anonymous memory and mapped file pages (the restored index is
  mapped: those pages count in RSS but are the page cache's, which the kernel may reclaim);
- ``stop s``: SIGTERM to exit, after the first start (the whole index saved), after the restart (nothing
  new: nothing to save), after a run that remembered 200 memories and forgot 100 (a delta saved) and
  after the start following a compaction;
- ``ready after compaction s``: while the server is down another program deletes an eighth of the rows
  and the table is compacted (``doctor --compact``: every fragment rewritten), then a start; with the
  recalls sent meanwhile, as above (``refused`` counts those answered 503);
- ``ready again s``: one more restart after that.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import lancedb
import numpy as np

from app.memory.embeddings import create_embedder
from app.memory.reembed import compact_table
from app.memory.store.saved_index import INDEX_DIR, SAVE_MIN_ROWS
from app.settings import Settings
from bench.data import textgen
from bench.data.corpus import SCOPES, Corpus, bulk_load, random_unit_vectors
from bench.support import common
from bench.support.server import serve

DEFAULT_SIZES = (10_000, 100_000, 1_000_000)
TEXT_VARIETY = 20_000  # distinct sentences, repeated: generating a million costs minutes and measures nothing
K = 10
READY_TIMEOUT_S = 900.0
STOP_TIMEOUT_S = 300.0  # a stop that saves the whole index takes seconds at a million rows: measured, not killed
CHURN_REMEMBERS, CHURN_FORGETS = 200, 100
#: Ids are the row number in hex: two of sixteen last digits, an eighth of the rows, in every fragment.
OFFLINE_DELETE_PREDICATE = "id LIKE '%7' OR id LIKE '%b'"


def prepare(db_path: Path, provider: str, rows: int) -> np.ndarray:
    """Write a table of ``rows`` random unit vectors (unless one of that size is there); returns them."""
    settings = Settings(db_path=db_path, embedding_provider=provider)  # type: ignore[arg-type]
    embedder = create_embedder(settings)  # its identity and dimension only; never loaded
    vectors = random_unit_vectors(rows, embedder.dimension, seed=rows)
    marker = db_path / f".bench-scale-{rows}"
    if marker.exists():
        return vectors
    shutil.rmtree(db_path, ignore_errors=True)
    texts = textgen.sentences(min(rows, TEXT_VARIETY))
    data = Corpus([texts[i % len(texts)] for i in range(rows)], vectors,
                  [SCOPES[i % len(SCOPES)] for i in range(rows)], [f"{i:08x}" for i in range(rows)])
    bulk_load(db_path, data, embedder)
    marker.touch()
    return vectors


def numpy_scan_ms(vectors: np.ndarray, queries: np.ndarray) -> dict[str, float]:
    """An exact float32 top-10 per query over ``vectors``, in this process."""
    times = []
    for query in queries:
        started = time.perf_counter()
        scores = vectors @ query
        top = np.argpartition(-scores, K)[:K]
        top[np.argsort(-scores[top])]
        times.append(time.perf_counter() - started)
    return common.latency_summary_ms(times[2:])


async def _wait_ready(client: httpx.AsyncClient, spawned: float) -> float:
    while time.perf_counter() - spawned < READY_TIMEOUT_S:
        try:
            if (await client.get("/readyz")).status_code == 200:
                return time.perf_counter() - spawned
        except httpx.TransportError:
            pass
        await asyncio.sleep(0.05)  # polling another process, bounded by the deadline
    raise RuntimeError(f"not ready within {READY_TIMEOUT_S} s")


@dataclass
class Start:
    """One start as a client sees it: REST recalls one after another from spawn until ``/readyz`` is 200."""

    ready_s: float = 0.0
    answered_s: float | None = None  # spawn to the first recall answered 200
    latencies: list[float] = field(default_factory=list)  # every answer's, 503s included
    refused_latencies: list[float] = field(default_factory=list)  # the 503s' alone
    refused_before: int = 0  # 503 starting before the first answer (the gate still closed)
    refused_after: int = 0  # 503 after a recall was answered: what must not happen
    catching_up: int = 0  # answered with X-Catching-Up: true

    def figures(self, suffix: str = "") -> dict[str, Any]:
        return {f"ready{suffix}_s": round(self.ready_s, 2),
                f"first_recall{suffix}_s": None if self.answered_s is None else round(self.answered_s, 2),
                f"recalls_while_starting{suffix}": len(self.latencies),
                f"slowest_recall_while_starting{suffix}_ms":
                    round(max(self.latencies) * 1000, 1) if self.latencies else None,
                f"slowest_refusal_while_starting{suffix}_ms":
                    round(max(self.refused_latencies) * 1000, 1) if self.refused_latencies else None,
                f"refused_before_first{suffix}": self.refused_before,
                f"refused_after_first{suffix}": self.refused_after,
                f"catching_up_answers{suffix}": self.catching_up}


async def _recalls_until(client: httpx.AsyncClient, ready: asyncio.Task[float], queries: list[str],
                         spawned: float, start: Start) -> None:
    i = 0
    while not ready.done():
        started = time.perf_counter()
        try:
            params = {"q": queries[i % len(queries)], "limit": K}
            response = await client.get("/api/lancedb/vector-search", params=params)
        except httpx.TransportError:
            await asyncio.sleep(0.01)  # not listening yet
            continue
        if response.status_code not in (200, 503):
            raise RuntimeError(f"recall while starting: HTTP {response.status_code} {response.text[:200]}")
        start.latencies.append(time.perf_counter() - started)
        if response.status_code == 503:
            start.refused_latencies.append(start.latencies[-1])
            if start.answered_s is None:
                start.refused_before += 1
            else:
                start.refused_after += 1
        else:
            if start.answered_s is None:
                start.answered_s = time.perf_counter() - spawned
            start.catching_up += response.headers.get("X-Catching-Up") == "true"
        i += 1


async def _start(url: str, queries: list[str], spawned: float) -> Start:
    start = Start()
    async with httpx.AsyncClient(base_url=url, timeout=60.0) as probe, \
            httpx.AsyncClient(base_url=url, timeout=60.0) as client:
        ready = asyncio.create_task(_wait_ready(probe, spawned))
        await _recalls_until(client, ready, queries, spawned, start)
        start.ready_s = await ready
    return start


async def _recall_ms(url: str, queries: list[str]) -> dict[str, float]:
    times = []
    async with httpx.AsyncClient(base_url=url, timeout=60.0) as client:
        for i, query in enumerate(queries):
            started = time.perf_counter()
            response = await client.get("/api/lancedb/vector-search", params={"q": query, "limit": K})
            response.raise_for_status()
            if i >= 2:  # the first warm the connection
                times.append(time.perf_counter() - started)
    ms = [t * 1000 for t in times]
    return {"p50_ms": round(common.percentile(ms, 50), 2), "p99_ms": round(common.percentile(ms, 99), 2)}


def measure(db_path: Path, provider: str, vectors: np.ndarray, queries: int, log: Path) -> dict[str, Any]:
    texts = [f"what do I remember about {t}" for t in textgen.sentences(queries + 2)]
    shutil.rmtree(db_path / INDEX_DIR, ignore_errors=True)  # the first start reads the table
    stops: dict[str, float] = {}
    spawned = time.perf_counter()
    with _server(db_path, log, provider, stops, "first") as server:
        first = asyncio.run(_start(server.url, texts[:2], spawned))
        saved_after = asyncio.run(_saved(server.url)) if len(vectors) >= SAVE_MIN_ROWS else None
    spawned = time.perf_counter()
    with _server(db_path, log, provider, stops, "unchanged") as server:
        restart = asyncio.run(_start(server.url, texts, spawned))
        recall = asyncio.run(_recall_ms(server.url, texts))
        main_mb, children_mb = server.rss_parts_mb()
        split = _rss_split(server.pid)
    with _server(db_path, log, provider, stops, "with changes") as server:
        asyncio.run(_start(server.url, texts[:2], time.perf_counter()))
        asyncio.run(_churn(server.url))
    settings = Settings(db_path=db_path, embedding_provider=provider)  # type: ignore[arg-type]
    (db_path / f".bench-scale-{len(vectors)}").unlink(missing_ok=True)  # changed: a rerun writes it anew
    deleted = _delete_offline(settings)
    compact_table(settings)
    spawned = time.perf_counter()
    with _server(db_path, log, provider, stops, "after compaction") as server:
        compacted = asyncio.run(_start(server.url, texts, spawned))
    spawned = time.perf_counter()
    with _server(db_path, log, provider, stops, "again") as server:
        again = asyncio.run(_start(server.url, texts[:2], spawned))
    scan = numpy_scan_ms(vectors, random_unit_vectors(queries + 2, vectors.shape[1], seed=7))
    return {
        "rows": len(vectors), "first_ready_s": round(first.ready_s, 2),
        "saved_after_ready_s": saved_after and round(saved_after, 2), **restart.figures(),
        "deleted_before_compaction": deleted, **compacted.figures("_after_compaction"),
        "ready_again_s": round(again.ready_s, 2),
        **{f"stop_{name.replace(' ', '_')}_s": round(seconds, 2) for name, seconds in stops.items()},
        "recall_p50_ms": recall["p50_ms"], "recall_p99_ms": recall["p99_ms"],
        "numpy_p50_ms": scan["p50_ms"], "ratio_to_numpy": round(recall["p50_ms"] / scan["p50_ms"], 3),
        "server_rss_mb": round(main_mb), **split, "model_rss_mb": round(children_mb),
        "rss_mb": round(main_mb + children_mb),
    }


async def _saved(url: str) -> float:
    """Wait for the saving thread to write the index of a first load; seconds from the call."""
    started = time.perf_counter()
    async with httpx.AsyncClient(base_url=url, timeout=60.0) as client:
        while time.perf_counter() - started < READY_TIMEOUT_S:
            index = (await client.get("/readyz")).json()["memory"]["index"]
            if index.get("saved_version") is not None and index["saved_version"] == index["version"]:
                return time.perf_counter() - started
            await asyncio.sleep(0.2)  # polling another process, bounded by the deadline
    raise RuntimeError("the index was not saved")


async def _churn(url: str) -> None:
    """What a day of use leaves: ``CHURN_REMEMBERS`` memories written and ``CHURN_FORGETS`` forgotten."""
    async with httpx.AsyncClient(base_url=url, timeout=60.0) as client:
        for i, sentence in enumerate(textgen.sentences(CHURN_REMEMBERS)):
            body = {"text": f"scale churn memory {i}: {sentence}", "scope": "global"}
            (await client.post("/api/lancedb/memories", json=body)).raise_for_status()
        listed = await client.get("/api/lancedb/memories", params={"limit": CHURN_FORGETS})
        for memory in listed.json():
            (await client.delete(f"/api/lancedb/memories/{memory['id']}")).raise_for_status()


def _delete_offline(settings: Settings) -> int:
    """Another program's clean-up while the server is down: ``OFFLINE_DELETE_PREDICATE`` (an eighth of the
    rows, spread over the table), so that the compaction after it rewrites every fragment."""
    table = lancedb.connect(str(settings.db_path)).open_table(settings.table)
    before = table.count_rows()
    table.delete(OFFLINE_DELETE_PREDICATE)
    return before - table.count_rows()


@contextmanager
def _server(db_path: Path, log: Path, provider: str, stops: dict[str, float], name: str) -> Iterator[Any]:
    """``serve``, with the time from the end of the block (SIGTERM) to the exit in ``stops[name]``."""
    log_path = log.with_name(f"{log.stem}-{name.replace(' ', '-')}.log")
    with serve(db_path, log_path, provider=provider, timeout_s=READY_TIMEOUT_S, wait_ready=False,
               extra_env={"MEMORY_MCP_LOG_LEVEL": "INFO"}, stop_timeout_s=STOP_TIMEOUT_S) as server:
        yield server
        stopping = time.perf_counter()
    stops[name] = time.perf_counter() - stopping


def _rss_split(pid: int) -> dict[str, int]:
    """The server's resident anonymous memory and mapped file pages, in MB (Linux)."""
    fields = {"RssAnon:": "server_anon_mb", "RssFile:": "server_file_mb"}
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    return {fields[p[0]]: round(int(p[1]) / 1024) for p in (line.split() for line in lines) if p and p[0] in fields}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)), help="comma-separated row counts")
    parser.add_argument("--provider", default="local", help="embedding provider (hash: no model, for a smoke run)")
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--data-dir", type=Path, help="keep the tables here (reused when the size matches)")
    parser.add_argument("--results-dir", type=Path)
    parser.add_argument("--output", default="scale")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    root = args.data_dir or Path(tempfile.mkdtemp(prefix="bench-scale-"))
    results = []
    try:
        for size in sizes:
            db_path = root / f"rows-{size}" / "lancedb"
            vectors = prepare(db_path, args.provider, size)
            results.append(measure(db_path, args.provider, vectors, args.queries, db_path.parent / "server.log"))
            del vectors
    finally:
        if args.data_dir is None:
            shutil.rmtree(root, ignore_errors=True)
    columns = ["rows", "first_ready_s", "ready_s", "ready_after_compaction_s", "ready_again_s",
               "first_recall_after_compaction_s", "slowest_recall_while_starting_ms",
               "slowest_recall_while_starting_after_compaction_ms", "refused_after_first",
               "refused_after_first_after_compaction", "stop_first_s", "stop_unchanged_s", "stop_with_changes_s",
               "stop_after_compaction_s",
               "recall_p50_ms", "recall_p99_ms", "numpy_p50_ms", "ratio_to_numpy", "server_anon_mb",
               "server_file_mb", "rss_mb"]
    common.print_table(f"scale ({args.provider})", columns, [[r[c] for c in columns] for r in results])
    common.write_json(args.output, {"machine": common.machine_info(), "provider": args.provider, "results": results},
                      args.results_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
