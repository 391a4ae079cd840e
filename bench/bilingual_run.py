"""Runs the bilingual set through the real MemoryService: every memory remembered in one scope, every
query recalled with the default ranking and again with lexical weight 0 (pure vector)."""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from app.memory.embeddings.registry import create_embedder
from app.memory.service import MemoryService
from app.settings import Settings
from bench.common import latency_summary_ms
from bench.data.bilingual import BilingualSet
from bench.vcache import CachingEmbedder

SCOPE = "custom:bilingual"


@dataclass
class BilingualRun:
    provider: str
    model: str
    service_ranked: list[list[str]] = field(default_factory=list)  # per query: memory ids (m001...)
    vector_ranked: list[list[str]] = field(default_factory=list)  # the same service with lexical weight 0
    doc_vectors: np.ndarray = field(default_factory=lambda: np.empty((0, 0), dtype=np.float32))
    query_vectors: np.ndarray = field(default_factory=lambda: np.empty((0, 0), dtype=np.float32))
    latencies_s: list[float] = field(default_factory=list)

    def timing(self) -> dict[str, object]:
        return {"recall_latency": latency_summary_ms(self.latencies_s)}


async def _recall_all(service: MemoryService, data: BilingualSet, to_set_id: dict[str, str], top_k: int,
                      latencies: list[float] | None = None) -> list[list[str]]:
    ranked = []
    for query in data.queries:
        start = time.perf_counter()
        result = await service.recall(query.text, top_k=top_k, scope=SCOPE)
        if latencies is not None:
            latencies.append(time.perf_counter() - start)
        ranked.append([to_set_id.get(hit.id, "?") for hit in result.hits])
    return ranked


async def run_bilingual(provider: str, data: BilingualSet, *, top_k: int = 10, use_cache: bool = True,
                        lexical_weight: float | None = None) -> BilingualRun:
    """Remember the set in a fresh service on a temporary LanceDB, then recall every query twice
    (``lexical_weight``: the ranking's, else the provider's default)."""
    with tempfile.TemporaryDirectory(prefix="bilingual-") as tmp:
        settings = Settings(db_path=Path(tmp) / "lancedb", kanban_db=Path(tmp) / "kanban.sqlite3",
                            embedding_provider=provider, rank_lexical_weight=lexical_weight)
        embedder = CachingEmbedder(create_embedder(settings), use_cache=use_cache)
        run = BilingualRun(provider, embedder.model)
        to_set_id: dict[str, str] = {}
        async with MemoryService.open(settings, embedder=embedder) as service:
            for memory in data.memories:  # one at a time: ids map back in order, 120 writes take ~1 s
                result = await service.remember(memory.text, tags=[memory.kind], scope=SCOPE)
                to_set_id[result.memory_id] = memory.id
            run.service_ranked = await _recall_all(service, data, to_set_id, top_k, run.latencies_s)
        async with MemoryService.open(settings.model_copy(update={"rank_lexical_weight": 0.0}),
                                      embedder=embedder) as service:
            run.vector_ranked = await _recall_all(service, data, to_set_id, top_k)
        run.doc_vectors = np.stack([embedder.documents[m.text] for m in data.memories])
        run.query_vectors = np.stack([embedder.queries[q.text] for q in data.queries])
        await embedder.close()
    return run
