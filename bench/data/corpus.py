"""Synthetic memories for the speed, scale, sharing and start-up benchmarks: vectors (cached), scopes, ids, a bulk load.

Loading 100k rows through REST would take minutes and measure nothing useful, so the table is
written with LanceDB directly in the service's own schema (``Store.open`` creates it with the
embedder identity in its metadata, ``Store.to_arrow`` builds rows of that schema); the server then
opens it like any existing table.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.memory import smart_metadata
from app.memory.embeddings.base import Embedder
from app.memory.store import commits
from app.memory.store.table import Store
from app.settings import Settings
from bench.data import textgen
from bench.support.common import CachingEmbedder, embed_cached

SCOPES = ("global", "agent:claude-code", "agent:antigravity", "project:bench")
SCOPE_WEIGHTS = (0.7, 0.1, 0.1, 0.1)
LOAD_CHUNK = 20_000


@dataclass
class Corpus:
    texts: list[str]
    vectors: np.ndarray  # (n, d) unit float32, row i is texts[i]
    scopes: list[str]
    ids: list[str]


def random_unit_vectors(n: int, dimension: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n, dimension), dtype=np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


async def corpus(embedder: CachingEmbedder, size: int) -> Corpus:
    """The first ``size`` synthetic sentences (a prefix of the 100k set) with vectors, scopes and ids."""
    texts = textgen.sentences(size)
    vectors = await embed_cached(embedder, texts)
    rng = np.random.default_rng(size)
    scopes = [SCOPES[i] for i in rng.choice(len(SCOPES), size=size, p=SCOPE_WEIGHTS)]
    ids: list[str] = []
    seen: set[str] = set()
    while len(ids) < size:
        candidate = uuid.uuid4().hex[:8]
        if candidate not in seen:
            seen.add(candidate)
            ids.append(candidate)
    return Corpus(texts, vectors, scopes, ids)


def _rows(data: Corpus, start: int, stop: int, model: str, now_ms: int) -> list[dict[str, object]]:
    rows = []
    for i in range(start, stop):
        agent = data.scopes[i].removeprefix("agent:") if data.scopes[i].startswith("agent:") else None
        timestamp = now_ms - (stop - i) * 1000
        # As rows.new_row writes them: memory-lancedb-pro's smart metadata included (its size is part of
        # what the vector cache holds).
        metadata = {"created": "2026-01-01T00:00:00.000Z", "tags": ["bench"], "agent": agent,
                    "embedding_model": model, smart_metadata.ORIGIN_KEY: "memory-mcp-bench",
                    **smart_metadata.for_new_row(data.texts[i], "patterns", timestamp)}
        rows.append({
            "id": data.ids[i], "text": data.texts[i], "vector": data.vectors[i], "scope": data.scopes[i],
            "category": "bench", "importance": 0.7, "timestamp": timestamp,
            "metadata": json.dumps(metadata),
        })
    return rows


def bulk_load(db_path: Path, data: Corpus, embedder: Embedder) -> dict[str, float]:
    """Create the service's table at ``db_path`` and append ``data`` in large commits, then compact."""
    # No vector cache: it would be saved beside the table by a thread of this process, racing the servers'.
    settings = Settings(db_path=db_path, embedding_provider=embedder.name, vector_cache=False)  # type: ignore[arg-type]
    start = time.perf_counter()
    store = Store.open(settings, embedder)
    now_ms = int(time.time() * 1000)
    for offset in range(0, len(data.texts), LOAD_CHUNK):
        stop = min(offset + LOAD_CHUNK, len(data.texts))
        store.table.add(commits.to_arrow(_rows(data, offset, stop, embedder.model, now_ms), store.table.schema))
    store.optimize()
    return {"rows": store.count(), "load_s": round(time.perf_counter() - start, 3)}
