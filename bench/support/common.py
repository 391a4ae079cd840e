"""Helpers shared by the benchmarks: percentiles, tables, JSON results, machine facts, exact top-k, and the
vector cache (``bench/cache/``) that lets a model embed each text once across runs."""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import platform
import re
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from app.memory.embeddings.base import Embedder
from app.memory.embeddings.registry import create_embedder
from app.settings import Settings

BENCH_DIR = Path(__file__).resolve().parents[1]
RESULTS_DIR = Path(os.environ.get("MEMORY_MCP_BENCH_RESULTS", BENCH_DIR / "results"))
CACHE_DIR = Path(os.environ.get("MEMORY_MCP_BENCH_CACHE", BENCH_DIR / "cache"))


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    if len(ordered) == 1:
        return float(ordered[0])
    rank = (len(ordered) - 1) * q / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return float(ordered[low] + (ordered[high] - ordered[low]) * (rank - low))


def latency_summary_ms(seconds: Sequence[float]) -> dict[str, float]:
    """p50/p95/mean in milliseconds of a list of durations in seconds."""
    ms = [s * 1000.0 for s in seconds]
    return {
        "p50_ms": round(percentile(ms, 50), 3),
        "p95_ms": round(percentile(ms, 95), 3),
        "mean_ms": round(statistics.fmean(ms), 3) if ms else float("nan"),
        "n": len(ms),
    }


def spread(seconds: Sequence[float], *, unit: str = "ms", quantiles: Sequence[int] = (50, 99)) -> dict[str, Any]:
    """``p<q>_<unit>`` for each quantile, ``max_<unit>`` and ``n`` of durations in seconds (``unit`` ms or s)."""
    scaled = [v * (1000.0 if unit == "ms" else 1.0) for v in seconds]
    out: dict[str, Any] = {f"p{q}_{unit}": round(percentile(scaled, q), 3) for q in quantiles}
    return {**out, f"max_{unit}": round(max(scaled), 3) if scaled else float("nan"), "n": len(scaled)}


def ratio(a: float, b: float) -> float:
    return round(a / b, 2) if b else float("nan")


def _cell(value: Any) -> str:
    if isinstance(value, float):
        if value != value:  # NaN
            return "-"
        return f"{value:.3f}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def format_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain fixed-width table, readable in a terminal and in a pasted report."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    line = "  ".join("-" * w for w in widths)
    out = [f"\n{title}", "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)), line]
    for row in cells:
        out.append("  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(row, widths, strict=True))))
    return "\n".join(out)


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    print(format_table(title, columns, rows), flush=True)


def machine_info() -> dict[str, Any]:
    """What the numbers were measured on, so results from two runs can be compared fairly."""
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    return info


def write_json(name: str, payload: dict[str, Any], results_dir: Path | None = None) -> Path:
    """Write ``<results>/<name>.json`` (the directory is gitignored) and return its path."""
    directory = results_dir or RESULTS_DIR
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2, sort_keys=False, default=_json_default) + "\n", encoding="utf-8")
    return path


def _json_default(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def disk_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` highest scores, best first (ties broken by lower index, deterministically)."""
    k = min(k, scores.shape[-1])
    if k <= 0:
        return np.empty(0, dtype=np.int64)
    n = scores.shape[-1]
    candidates = np.argpartition(-scores, k - 1)[:k] if k < n else np.arange(n)
    order = np.lexsort((candidates, -scores[candidates]))
    return candidates[order]


# --- vectors cached on disk ------------------------------------------------------------------------
# ``CachingEmbedder`` wraps a real embedder and is handed to ``MemoryService.open(..., embedder=...)``: the
# service still stores exactly the model's vectors, and the benchmark gets them back for the exact (numpy)
# reference without embedding anything twice.

_EMBED_CHUNK = 2_048


def _key(kind: str, text: str) -> str:
    return hashlib.sha1(f"{kind}\0{text}".encode()).hexdigest()


class VectorCache:
    """Digest -> vector for one model, loaded from and saved to two files (keys + matrix)."""

    def __init__(self, identity: dict[str, str], directory: Path | None = None) -> None:
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{identity['provider']}-{identity['model']}-{identity['dimension']}")
        self.directory = directory or CACHE_DIR
        self._keys_path = self.directory / f"{slug}.keys.txt"
        self._vectors_path = self.directory / f"{slug}.vectors.npy"
        self._index: dict[str, int] = {}
        self._saved = np.empty((0, int(identity["dimension"])), dtype=np.float32)
        self._pending: list[np.ndarray] = []
        if self._keys_path.exists() and self._vectors_path.exists():
            keys = self._keys_path.read_text(encoding="utf-8").split()
            vectors = np.load(self._vectors_path)
            if len(keys) == len(vectors):  # a torn write from an interrupted run is simply ignored
                self._index = {k: i for i, k in enumerate(keys)}
                self._saved = vectors

    def __len__(self) -> int:
        return len(self._index)

    def _row(self, i: int) -> np.ndarray:
        if i < len(self._saved):
            return self._saved[i]
        return self._pending[i - len(self._saved)]

    def get(self, kind: str, texts: Sequence[str]) -> list[np.ndarray | None]:
        return [self._row(i) if (i := self._index.get(_key(kind, t))) is not None else None for t in texts]

    def put(self, kind: str, texts: Sequence[str], vectors: np.ndarray) -> None:
        for text, vector in zip(texts, vectors, strict=True):
            key = _key(kind, text)
            if key not in self._index:
                self._index[key] = len(self._index)
                self._pending.append(np.asarray(vector, dtype=np.float32))

    def save(self) -> None:
        """Write everything added since loading (whole files: simple, and fine at 10^5 rows)."""
        if not self._pending:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        self._saved = np.vstack([self._saved, np.stack(self._pending)])
        self._pending = []
        keys = sorted(self._index, key=self._index.__getitem__)
        np.save(self._vectors_path, self._saved)
        self._keys_path.write_text("\n".join(keys) + "\n", encoding="utf-8")


class CachingEmbedder(Embedder):
    """Delegates to ``inner`` for texts not yet cached; remembers every vector it returned."""

    def __init__(self, inner: Embedder, cache: VectorCache | None = None, *, use_cache: bool = True) -> None:
        self.inner = inner
        self.name = inner.name
        self.model = inner.model
        self.dimension = inner.dimension
        self.default_dedup_threshold = getattr(inner, "default_dedup_threshold", 0.9)
        self.cache = cache or VectorCache(inner.identity)
        self.use_cache = use_cache
        self.model_seconds = 0.0  # wall time with at least one real model call in flight (not cache lookups)
        self._in_flight = 0
        self._busy_since = 0.0
        self.model_texts = 0
        self.cache_hits = 0
        self.queries: dict[str, np.ndarray] = {}
        self.documents: dict[str, np.ndarray] = {}

    @property
    def identity(self) -> dict[str, str]:
        return self.inner.identity

    async def load(self) -> None:
        await self.inner.load()

    async def close(self) -> None:
        self.cache.save()
        await self.inner.close()

    async def _embed(self, kind: str, texts: Sequence[str]) -> np.ndarray:
        found = self.cache.get(kind, texts) if self.use_cache else [None] * len(texts)
        missing = [i for i, v in enumerate(found) if v is None]
        self.cache_hits += len(texts) - len(missing)
        if missing:
            self._in_flight += 1
            if self._in_flight == 1:
                self._busy_since = time.perf_counter()
            try:
                if kind == "q":
                    fresh = np.stack([await self.inner.embed_query(texts[i]) for i in missing])
                else:
                    fresh = await self.inner.embed_documents([texts[i] for i in missing])
            finally:
                self._in_flight -= 1
                if self._in_flight == 0:  # concurrent calls overlap: count their union, not their sum
                    self.model_seconds += time.perf_counter() - self._busy_since
            self.model_texts += len(missing)
            self.cache.put(kind, [texts[i] for i in missing], fresh)
            for i, vector in zip(missing, fresh, strict=True):
                found[i] = vector
        return np.stack([np.asarray(v, dtype=np.float32) for v in found])

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        vectors = await self._embed("d", texts)
        self.documents.update(zip(texts, vectors, strict=True))
        return vectors

    async def embed_query(self, text: str) -> np.ndarray:
        vector = (await self._embed("q", [text]))[0]
        self.queries[text] = vector
        return vector


async def embed_cached(embedder: CachingEmbedder, texts: list[str], kind: str = "d") -> np.ndarray:
    """Vectors for ``texts``; only texts missing from bench/cache reach the model. Saves the cache."""
    parts = []
    for start in range(0, len(texts), _EMBED_CHUNK):
        chunk = texts[start : start + _EMBED_CHUNK]
        if kind == "q":
            parts.append(np.stack([await embedder.embed_query(t) for t in chunk]))
        else:
            parts.append(await embedder.embed_documents(chunk))
    embedder.cache.save()
    embedder.documents.clear()  # the benchmark keeps its own matrix; no second copy
    return np.concatenate(parts) if parts else np.empty((0, embedder.dimension), dtype=np.float32)


async def caching_embedder(provider: str, cache_dir: str | None = None) -> CachingEmbedder:
    """``provider``'s embedder behind the vector cache (in ``cache_dir``, default bench/cache), loaded."""
    inner = create_embedder(Settings(embedding_provider=provider))
    embedder = CachingEmbedder(inner, VectorCache(inner.identity, Path(cache_dir) if cache_dir else None))
    await embedder.load()
    return embedder


# --- the command line the scripts share --------------------------------------------------------------

def output_options(parser: argparse.ArgumentParser, name: str, *, cache: bool = True) -> None:
    """``--cache-dir`` (with ``cache``), ``--results-dir`` and ``--output`` (default ``name``)."""
    if cache:
        parser.add_argument("--cache-dir", default=None, help="vector cache directory (default bench/cache)")
    parser.add_argument("--results-dir", default=None, help="where the JSON goes (default bench/results)")
    parser.add_argument("--output", default=name, help="result file name under bench/results/ (no .json)")


def measure_and_write(args: argparse.Namespace, measure: Callable[[argparse.Namespace], Awaitable[dict[str, Any]]],
                      report: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """Run ``measure(args)``, print its tables with ``report``, and write ``<results>/<args.output>.json``."""
    payload = asyncio.run(measure(args))
    report(payload)
    print(f"\nwrote {write_json(args.output, payload, Path(args.results_dir) if args.results_dir else None)}")
    return payload
