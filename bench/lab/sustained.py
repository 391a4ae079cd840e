"""Remember under sustained load: does throughput hold for minutes, not just for a 15-second phase?

    python -m bench.lab.sustained                   # 100k memories, 32 clients, 5 minutes in 30 s windows
    python -m bench.lab.sustained --size 10000 --seconds 120 --window 15

The table is the speed benchmark's (same synthetic memories and cached vectors, bulk-loaded), served
by a real server process (``python -m app.cli serve``) and written by ``--clients`` keep-alive
connections as fast as they get answers. Per window: remembers per second, latency p50/p95/max,
errors; at the end, the table's versions and fragments on disk. A compaction shows as a window's
latency maximum (the writer waits for it). Results go to ``bench/results/sustained.json``.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.data import textgen
from bench.data.corpus import bulk_load, corpus
from bench.support import server as srv
from bench.support.common import (
    caching_embedder,
    disk_bytes,
    latency_summary_ms,
    machine_info,
    measure_and_write,
    output_options,
    print_table,
)

WRITES_PER_SECOND_CEILING = 1_000  # texts prepared per second of load: more than the server takes


def windows(calls: Sequence[srv.Call], seconds: float, window: float) -> list[dict[str, Any]]:
    """Throughput and latency of the calls answered in each ``window`` seconds of the run."""
    out = []
    start = 0.0
    while start < seconds:
        inside = [c for c in calls if start <= c.done_s < start + window]
        latency = latency_summary_ms([c.latency_s for c in inside]) if inside else {}
        out.append({
            "from_s": round(start, 1), "per_s": round(len(inside) / window, 1),
            "p50_ms": latency.get("p50_ms"), "p95_ms": latency.get("p95_ms"),
            "max_ms": round(max(c.latency_s for c in inside) * 1000, 1) if inside else None,
            "errors": sum(not 200 <= c.status < 300 for c in inside),
        })
        start += window
    return out


def table_files(db: Path) -> dict[str, int]:
    table = db / "memories.lance"
    return {
        "versions": sum(1 for p in (table / "_versions").glob("*.manifest")),
        "data_files": sum(1 for _ in (table / "data").glob("*.lance")),
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    embedder = await caching_embedder(args.provider, args.cache_dir)
    data = await corpus(embedder, args.size)
    texts = textgen.sentences(int(args.seconds * WRITES_PER_SECOND_CEILING), seed=args.size + 11)
    with tempfile.TemporaryDirectory(prefix="bench-sustained-") as tmp:
        db = Path(tmp) / "lancedb"
        loaded = bulk_load(db, data, embedder)
        await embedder.close()
        with srv.serve(db, Path(tmp) / "server.log", provider=args.provider) as server:
            calls, wall = await srv.remember_calls(server.url, texts, args.clients, args.seconds)
            rss_mb = round(server.rss_mb(), 1)
        files = table_files(db)
        disk_mb = round(disk_bytes(db) / 2**20, 1)
    return {
        "machine": machine_info(), "model": embedder.identity, "size": args.size, "clients": args.clients,
        "bulk_load": loaded, "wall_s": round(wall, 1), "writes": len(calls),
        "per_s": round(len(calls) / wall, 1) if wall else 0.0, "windows": windows(calls, args.seconds, args.window),
        "rss_end_mb": rss_mb, "disk_end_mb": disk_mb, **files,
    }


def report(result: dict[str, Any]) -> None:
    print_table(
        f"remember under sustained load: {result['size']:,} memories, {result['clients']} clients "
        f"({result['writes']:,} writes, {result['per_s']}/s overall)",
        ["from s", "per s", "p50 ms", "p95 ms", "max ms", "errors"],
        [[w["from_s"], w["per_s"], w["p50_ms"], w["p95_ms"], w["max_ms"], w["errors"]] for w in result["windows"]],
    )
    print(f"at the end: {result['versions']} versions and {result['data_files']} data files kept, "
          f"{result['disk_end_mb']} MB on disk, server RSS {result['rss_end_mb']} MB (with the model child)")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=100_000, help="memories in the table before the load")
    parser.add_argument("--clients", type=int, default=32, help="concurrent remember clients")
    parser.add_argument("--seconds", type=float, default=300.0, help="how long the load runs")
    parser.add_argument("--window", type=float, default=30.0, help="seconds per reported window")
    parser.add_argument("--provider", default="local", help="embedding provider (hash only for the smoke test)")
    output_options(parser, "sustained")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    return measure_and_write(parse_args(argv), main_async, report)


if __name__ == "__main__":
    main()
