"""Speed and scale at 1k / 10k / 100k memories, beside the physical reference (numpy brute force).

    python -m bench.speed                       # 1k, 10k, 100k (about 5 minutes once vectors are cached)
    python -m bench.speed --sizes 1000,10000
    python -m bench.speed --quick               # 1k and 10k, fewer queries: a minute

Per size, in one run: numpy top-10 over the vectors in RAM, the store's vector search alone (plus
recall@10 against exact), the local embedder alone, REST and MCP (Streamable HTTP) recall p50/p95
against a real server process, concurrent recall clients, remember throughput (1 and N clients),
the server's RSS and the LanceDB directory's size. Results go to ``bench/results/speed.json``.

Server variants run on copies of the same table (``--variants``, default ``baseline,cache``): ``cache`` (the
app as configured by default), ``baseline`` (every search a LanceDB flat scan, ``MEMORY_MCP_VECTOR_CACHE=false``),
``vector`` (pure vector ranking, lexical weight 0) and ``fp32`` (the local model's float32 pass). The loads
are sent by ``bench.support.server.RawConnection``, so the load generator does not take the server's CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from app.memory import keyword
from app.memory.embeddings.base import Embedder
from app.memory.ranking import keyword_query
from app.memory.store import filters
from app.memory.store.table import Store
from app.settings import Settings
from bench.data import textgen
from bench.data.corpus import Corpus, bulk_load, corpus
from bench.support import server as srv
from bench.support.common import (
    CachingEmbedder,
    caching_embedder,
    disk_bytes,
    embed_cached,
    latency_summary_ms,
    machine_info,
    measure_and_write,
    output_options,
    print_table,
    top_k,
)

TARGETS = {"search_vs_numpy": 2.0, "rest_vs_embed_plus_exact": 3.0, "remember_per_s": 500.0, "rss_mb": 600.0}
SCOPED = "agent:claude-code"
K = 10
WARMUP = 3
RSS_PHASES = ("start", "rest_recall", "mcp_recall", "concurrent_recall", "remember_single", "remember_concurrent")
KEYWORD_QUERIES = 20
CONCURRENT_SEARCHERS = 32
# cache: the app as configured by default; baseline: every search a LanceDB scan; vector: the cache
# with pure vector ranking (no hybrid keyword pool), to see the search path alone end to end.
VARIANT_ENV = {
    "baseline": {"MEMORY_MCP_VECTOR_CACHE": "false"},
    "cache": {"MEMORY_MCP_VECTOR_CACHE": "true"},
    "vector": {"MEMORY_MCP_VECTOR_CACHE": "true", "MEMORY_MCP_RANK_LEXICAL_WEIGHT": "0"},
    "fp32": {"MEMORY_MCP_VECTOR_CACHE": "true", "MEMORY_MCP_LOCAL_MODEL_INT8": "false"},
}


# --- in process: numpy, the store's search, the embedder ------------------------------------------

def _timed(fn: Callable[[int], Any], n: int) -> tuple[list[float], list[Any]]:
    for i in range(min(WARMUP, n)):
        fn(i)
    latencies, results = [], []
    for i in range(n):
        start = time.perf_counter()
        results.append(fn(i))
        latencies.append(time.perf_counter() - start)
    return latencies, results


def numpy_reference(matrix: np.ndarray, queries: np.ndarray) -> tuple[dict[str, float], list[np.ndarray]]:
    """The physical reference: one matrix-vector product and a partial sort, vectors already in RAM."""
    latencies, results = _timed(lambda i: top_k(matrix @ queries[i], K), len(queries))
    return latency_summary_ms(latencies), results


def recall_vs_exact(
    found_ids: Sequence[Sequence[str]], matrix: np.ndarray, queries: np.ndarray, ids: Sequence[str],
    allowed: np.ndarray | None = None,
) -> float:
    """Mean share of the exact top-k found; a result tied with the k-th exact score (1e-5) counts as exact."""
    position = {memory_id: i for i, memory_id in enumerate(ids)}
    shares = []
    for qi, found in enumerate(found_ids):
        scores = matrix @ queries[qi]
        if allowed is not None:
            scores = np.where(allowed, scores, -np.inf)
        exact = top_k(scores, K)
        cut = scores[exact[-1]] - 1e-5
        good = sum(1 for memory_id in found[:K] if memory_id in position and scores[position[memory_id]] >= cut)
        shares.append(good / min(K, len(exact)))
    return float(np.mean(shares)) if shares else float("nan")


def _search(store: Store, queries: np.ndarray, scope: str | None) -> tuple[list[float], list[Any]]:
    where = filters.eq("scope", scope) if scope else None
    return _timed(lambda i: [row["id"] for row in store.vector_search(queries[i], where, K)], len(queries))


def store_search(
    store: Store, queries: np.ndarray, scope: str | None = None
) -> tuple[dict[str, float], list[list[str]]]:
    """``Store.vector_search`` alone (what recall runs after embedding), optionally scope-filtered."""
    latencies, results = _search(store, queries, scope)
    return latency_summary_ms(latencies), results


def keyword_search(store: Store, queries: Sequence[str]) -> dict[str, float]:
    """The service's substring keyword search (what a hybrid ranking would add per recall), top-50."""
    terms = [keyword_query(q) for q in queries]
    latencies, _ = _timed(lambda i: keyword.search(store, terms[i], None, 50), len(terms))
    return latency_summary_ms(latencies)


def cache_search(store: Store, queries: np.ndarray, scope: str | None = None) -> dict[str, Any]:
    """``Store.vector_search`` with the vector cache on (the batch thread included): load time, size, latency."""
    assert store.cache is not None, "open the store with vector_cache=True"
    latencies, results = _search(store, queries, scope)
    return {"latency": latency_summary_ms(latencies), "results": results,
            "reload_s": round(store.cache.last_reload_s, 3), "matrix_mb": round(store.cache.nbytes / 2**20, 1)}


def concurrent_cache_search(store: Store, queries: np.ndarray, threads: int) -> dict[str, Any]:
    """``threads`` threads searching at once (as concurrent duplicate checks do): wall time per search."""
    assert store.batcher is not None, "open the store with vector_cache=True"
    batches, searches = store.batcher.batches, store.batcher.searches
    work = [queries[i % len(queries)] for i in range(max(threads * 4, len(queries)))]
    with ThreadPoolExecutor(threads) as pool:
        start = time.perf_counter()
        list(pool.map(lambda q: store.vector_search(q, None, K), work))
        wall = time.perf_counter() - start
    products = store.batcher.batches - batches
    return {"threads": threads, "searches": len(work), "ms_per_search": round(wall * 1000 / len(work), 3),
            "per_batch": round((store.batcher.searches - searches) / max(products, 1), 1)}


async def embedder_alone(embedder: Embedder, texts: Sequence[str]) -> dict[str, float]:
    """One query at a time through the provider (worker thread included), as recall calls it."""
    for text in texts[:WARMUP]:
        await embedder.embed_query(text)
    latencies = []
    for text in texts:
        start = time.perf_counter()
        await embedder.embed_query(text)
        latencies.append(time.perf_counter() - start)
    return latency_summary_ms(latencies)


def _in_process(db: Path, data: Corpus, queries: list[str], qvecs: np.ndarray, embedder: Any) -> dict[str, Any]:
    """Store-only search (unfiltered and scope-filtered) and the numpy reference, recall checked."""
    store = Store.open(Settings(db_path=db, embedding_provider=embedder.name, vector_cache=False), embedder)
    cached = Store.open(Settings(db_path=db, embedding_provider=embedder.name, vector_cache=True), embedder)
    numpy_lat, _ = numpy_reference(data.vectors, qvecs)
    search_lat, found = store_search(store, qvecs)
    scoped_lat, scoped_found = store_search(store, qvecs, scope=SCOPED)
    allowed = np.array([s == SCOPED for s in data.scopes])
    cache = cache_search(cached, qvecs)
    scoped_cache = cache_search(cached, qvecs, scope=SCOPED)
    return {
        "vector_cache_concurrent": concurrent_cache_search(cached, qvecs, CONCURRENT_SEARCHERS),
        "keyword_search": keyword_search(store, queries[:KEYWORD_QUERIES]),
        "keyword_search_cached": keyword_search(cached, queries[:KEYWORD_QUERIES]),
        "vector_cache": {
            **cache["latency"], "reload_s": cache["reload_s"], "matrix_mb": cache["matrix_mb"],
            "recall@10": round(recall_vs_exact(cache["results"], data.vectors, qvecs, data.ids), 4),
        },
        "vector_cache_scoped": {
            **scoped_cache["latency"],
            "recall@10": round(recall_vs_exact(scoped_cache["results"], data.vectors, qvecs, data.ids, allowed), 4),
        },
        "numpy": numpy_lat,
        "store_search": {**search_lat, "recall@10": round(recall_vs_exact(found, data.vectors, qvecs, data.ids), 4)},
        "store_search_scoped": {
            **scoped_lat,
            "recall@10": round(recall_vs_exact(scoped_found, data.vectors, qvecs, data.ids, allowed), 4),
        },
    }


async def _server_part(db: Path, data: Corpus, queries: list[str], qvecs: np.ndarray,
                       args: argparse.Namespace, sweep: bool, variant: str) -> dict[str, Any]:
    """One server process, configured as ``VARIANT_ENV[variant]`` says."""
    out: dict[str, Any] = {}
    env = VARIANT_ENV[variant]
    log = db.parent / f"server-{variant}.log"
    with srv.serve(db, log, provider=args.provider, extra_env=env) as server, srv.RssSampler(server) as rss:
        out["rss_start_mb"] = round(server.rss_mb(), 1)
        out["rss_start_children_mb"] = round(server.children_rss_mb(), 1)
        rss.phase("rest_recall")
        rest, rest_found = await srv.rest_recall(server.url, queries)
        rest["recall@10"] = round(recall_vs_exact(rest_found, data.vectors, qvecs, data.ids), 4)
        out["rest_recall"] = rest
        rss.phase("mcp_recall")
        out["mcp_recall"] = await srv.mcp_recall(server.url, queries[: args.mcp_queries])
        if sweep:
            rss.phase("concurrent_recall")
            out["concurrent_recall"] = [
                await srv.concurrent_recall(server.url, queries, c, args.per_client) for c in args.clients
            ]
        out["rss_after_recall_mb"] = round(server.rss_mb(), 1)
        fresh = textgen.sentences(args.writes, seed=len(data.texts) + 7)
        rss.phase("remember_single")
        out["remember_single"] = await srv.remember_throughput(server.url, fresh[: args.writes // 4], 1,
                                                               args.write_seconds)
        rss.phase("remember_concurrent")
        out["remember_concurrent"] = await srv.remember_throughput(server.url, fresh[args.writes // 4 :],
                                                                   args.writers, args.write_seconds)
        out["rss_end_mb"] = round(server.rss_mb(), 1)
        out["rss_peak_mb"] = round(max(rss.peak_mb, out["rss_end_mb"]), 1)
        out["rss_main_peak_mb"] = round(rss.main_peak_mb, 1)
        out["rss_phase_peaks_mb"] = dict(rss.phase_peaks_mb)
    return out


async def run_size(size: int, embedder: CachingEmbedder, queries: list[str], qvecs: np.ndarray,
                   embed_ms: float, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    started = time.perf_counter()
    data = await corpus(embedder, size)
    db = tmp / f"size-{size}" / "lancedb"
    db.parent.mkdir(parents=True)
    result: dict[str, Any] = {"size": size, "dimension": embedder.dimension, "bulk_load": bulk_load(db, data, embedder)}
    result["disk_loaded_mb"] = round(disk_bytes(db) / 2**20, 2)
    result.update(await asyncio.to_thread(_in_process, db, data, queries, qvecs, embedder))
    for variant in args.variants:
        # Each variant gets its own copy of the freshly loaded table: the previous one's writes would skew it.
        copy = tmp / f"size-{size}-{variant}" / "lancedb"
        await asyncio.to_thread(shutil.copytree, db, copy)
        part = await _server_part(copy, data, queries, qvecs, args, size == max(args.sizes), variant)
        part["disk_end_mb"] = round(disk_bytes(copy) / 2**20, 2)
        await asyncio.to_thread(shutil.rmtree, copy)
        part["ratios"] = ratios({**result, **part}, embed_ms, variant)
        result[variant] = part
    result["wall_s"] = round(time.perf_counter() - started, 1)
    return result


def ratios(r: dict[str, Any], embed_ms: float, variant: str) -> dict[str, Any]:
    """The figures the targets are judged on, for one server variant."""
    numpy_p50 = r["numpy"]["p50_ms"]
    search = r["store_search"] if variant == "baseline" else r["vector_cache"]
    out: dict[str, Any] = {
        "search_vs_numpy": round(search["p50_ms"] / numpy_p50, 2),
        "rest_vs_embed_plus_exact": round(r["rest_recall"]["p50_ms"] / (embed_ms + numpy_p50), 2),
        "remember_per_s": r["remember_concurrent"]["per_s"],
        "rss_mb": r["rss_peak_mb"],
        "search_recall@10": search["recall@10"],
    }
    sweep = r.get("concurrent_recall")
    if sweep:
        base = sweep[0]["p95_ms"]
        cores = os.cpu_count() or 1
        out["p95_growth"] = [
            {"clients": s["clients"], "clients_per_core": s["clients"] / cores, "p95_ms": s["p95_ms"],
             "p95_vs_1": round(s["p95_ms"] / base, 2), "linear_limit": max(1.0, s["clients"] / cores)}
            for s in sweep
        ]
    return out


def _row(sizes: list[dict[str, Any]], label: str, get: Any) -> list[Any]:
    values: list[Any] = []
    for size in sizes:
        try:
            values.append(get(size))
        except (KeyError, TypeError, IndexError):
            values.append(float("nan"))
    return [label, *values]


def _server_rows(sizes: list[dict[str, Any]], v: str) -> list[list[Any]]:
    def pick(path: str) -> Any:
        def get(s: dict[str, Any]) -> Any:
            value: Any = s[v]
            for key in path.split("."):
                value = value[key]
            return value

        return get

    specs = [
        ("REST recall p50 ms", "rest_recall.p50_ms"), ("REST recall p95 ms", "rest_recall.p95_ms"),
        ("REST recall@10 vs exact", "rest_recall.recall@10"), ("MCP recall p50 ms", "mcp_recall.p50_ms"),
        ("MCP recall p95 ms", "mcp_recall.p95_ms"), ("remember 1 client /s", "remember_single.per_s"),
        ("remember N clients /s", "remember_concurrent.per_s"),
        ("remember N clients p95 ms", "remember_concurrent.latency.p95_ms"),
        ("remember errors (N clients)", "remember_concurrent.errors"), ("server RSS start MB", "rss_start_mb"),
        ("of which the model child", "rss_start_children_mb"),
        ("server RSS peak MB", "rss_peak_mb"),
        ("server process alone, peak MB", "rss_main_peak_mb"),
        *((f"RSS peak during {phase} MB", f"rss_phase_peaks_mb.{phase}") for phase in RSS_PHASES),
    ]
    return [_row(sizes, f"[{v}] {label}", pick(path)) for label, path in specs]


def report(payload: dict[str, Any]) -> None:
    sizes = payload["sizes"]
    variants = payload["variants"]
    cols = ["metric", *(f"{s['size']:,}" for s in sizes)]
    rows = [
        _row(sizes, "numpy top-10 p50 ms", lambda s: s["numpy"]["p50_ms"]),
        _row(sizes, "numpy top-10 p95 ms", lambda s: s["numpy"]["p95_ms"]),
        _row(sizes, "store (LanceDB) search p50 ms", lambda s: s["store_search"]["p50_ms"]),
        _row(sizes, "store (LanceDB) search p95 ms", lambda s: s["store_search"]["p95_ms"]),
        _row(sizes, "store search recall@10 vs exact", lambda s: s["store_search"]["recall@10"]),
        _row(sizes, f"store search {SCOPED} p50 ms", lambda s: s["store_search_scoped"]["p50_ms"]),
        _row(sizes, "store search scoped recall@10", lambda s: s["store_search_scoped"]["recall@10"]),
        _row(sizes, "vector cache search p50 ms", lambda s: s["vector_cache"]["p50_ms"]),
        _row(sizes, "vector cache search p95 ms", lambda s: s["vector_cache"]["p95_ms"]),
        _row(sizes, "vector cache recall@10 vs exact", lambda s: s["vector_cache"]["recall@10"]),
        _row(sizes, f"vector cache {SCOPED} p50 ms", lambda s: s["vector_cache_scoped"]["p50_ms"]),
        _row(sizes, "vector cache scoped recall@10", lambda s: s["vector_cache_scoped"]["recall@10"]),
        _row(sizes, f"vector cache {CONCURRENT_SEARCHERS} threads ms/search",
             lambda s: s["vector_cache_concurrent"]["ms_per_search"]),
        _row(sizes, "vector cache searches per product", lambda s: s["vector_cache_concurrent"]["per_batch"]),
        _row(sizes, "keyword search (top-50) p50 ms", lambda s: s["keyword_search"]["p50_ms"]),
        _row(sizes, "keyword search from the cache p50 ms", lambda s: s["keyword_search_cached"]["p50_ms"]),
        _row(sizes, "vector cache load s", lambda s: s["vector_cache"]["reload_s"]),
        _row(sizes, "embedder alone (1 query) p50 ms", lambda s: payload["embedder_alone"]["p50_ms"]),
        _row(sizes, "embedder alone (1 query) p95 ms", lambda s: payload["embedder_alone"]["p95_ms"]),
    ]
    for v in variants:
        rows += _server_rows(sizes, v)
    rows += [
        _row(sizes, "disk after bulk load MB", lambda s: s["disk_loaded_mb"]),
        *(_row(sizes, f"[{v}] disk after remember phase MB", lambda s, v=v: s[v]["disk_end_mb"]) for v in variants),
        _row(sizes, "bulk load s", lambda s: s["bulk_load"]["load_s"]),
    ]
    print_table("Speed (one run; latencies in ms)", cols, rows)
    target_rows = []
    for v in variants:
        target_rows += [
            _row(sizes, f"[{v}] search p50 / numpy p50 (<= 2)", lambda s, v=v: s[v]["ratios"]["search_vs_numpy"]),
            _row(sizes, f"[{v}] search recall@10 (= 1.0)", lambda s, v=v: s[v]["ratios"]["search_recall@10"]),
            _row(sizes, f"[{v}] REST p50 / (embed + numpy) (< 3)",
                 lambda s, v=v: s[v]["ratios"]["rest_vs_embed_plus_exact"]),
            _row(sizes, f"[{v}] remember N clients /s (>= 500)", lambda s, v=v: s[v]["ratios"]["remember_per_s"]),
            _row(sizes, f"[{v}] server RSS peak MB (< 600)", lambda s, v=v: s[v]["ratios"]["rss_mb"]),
        ]
    print_table("Targets (judged at 100k; smaller sizes show the trend)", cols, target_rows)
    largest = sizes[-1]
    for v in variants:
        growth = largest.get(v, {}).get("ratios", {}).get("p95_growth")
        if growth:
            print_table(
                f"[{v}] concurrent REST recall at {largest['size']:,} ({os.cpu_count()} cores): p95 vs 1 client",
                ["clients", "clients/core", "p50 ms", "p95 ms", "p95 / p95(1)", "linear limit"],
                [[g["clients"], g["clients_per_core"], c["p50_ms"], g["p95_ms"], g["p95_vs_1"], g["linear_limit"]]
                 for g, c in zip(growth, largest[v]["concurrent_recall"], strict=True)],
            )


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    embedder = await caching_embedder(args.provider, args.cache_dir)
    queries = textgen.queries(args.queries)
    qvecs = await embed_cached(embedder, queries, kind="q")
    payload: dict[str, Any] = {"machine": machine_info(), "targets": TARGETS, "model": embedder.identity,
                               "variants": args.variants}
    payload["embedder_alone"] = await embedder_alone(embedder.inner, queries)
    embed_ms = payload["embedder_alone"]["p50_ms"]
    payload["sizes"] = []
    with tempfile.TemporaryDirectory(prefix="bench-speed-") as tmp:
        for size in args.sizes:
            result = await run_size(size, embedder, queries, qvecs, embed_ms, args, Path(tmp))
            payload["sizes"].append(result)
            print(f"size {size:,}: done in {result['wall_s']} s", flush=True)
    await embedder.close()
    return payload


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,10000,100000", help="table sizes, comma-separated")
    parser.add_argument("--quick", action="store_true", help="1k and 10k with fewer queries and writes")
    parser.add_argument("--queries", type=int, default=100, help="sequential recall queries per transport")
    parser.add_argument("--mcp-queries", type=int, default=60)
    parser.add_argument("--clients", default="1,2,5,10,20", help="concurrent recall clients (largest size)")
    parser.add_argument("--per-client", type=int, default=20, help="recalls per concurrent client")
    parser.add_argument("--writes", type=int, default=4000, help="remember calls available (1/4 single, rest N)")
    parser.add_argument("--writers", type=int, default=32, help="concurrent remember clients (>= 16)")
    parser.add_argument("--write-seconds", type=float, default=15.0, help="time cap per remember phase")
    parser.add_argument("--variants", default="baseline,cache", help=f"server variants: {', '.join(VARIANT_ENV)}")
    parser.add_argument("--provider", default="local", help="embedding provider (hash only for the smoke test)")
    output_options(parser, "speed")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.queries, args.mcp_queries, args.per_client = "1000,10000", 30, 20, 3
        args.clients, args.writes, args.write_seconds = "1,20", 1200, 5.0
    args.sizes = sorted(int(s) for s in str(args.sizes).split(",") if s.strip())
    args.clients = [int(c) for c in str(args.clients).split(",") if c.strip()]
    args.variants = [v.strip() for v in str(args.variants).split(",") if v.strip()]
    if unknown := set(args.variants) - set(VARIANT_ENV):
        parser.error(f"unknown variants: {', '.join(sorted(unknown))}")
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    return measure_and_write(parse_args(argv), main_async, report)


if __name__ == "__main__":
    main()
