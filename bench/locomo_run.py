"""Runs LoCoMo through the real MemoryService: one scope per conversation, every turn remembered."""

from __future__ import annotations

import asyncio
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from app.memory.embeddings.registry import create_embedder
from app.memory.ranking import keyword_query
from app.memory.service import MemoryService
from app.settings import Settings
from bench.common import latency_summary_ms
from bench.data.locomo import Conversation
from bench.vcache import CachingEmbedder


@dataclass
class ConversationRun:
    """What one model's service run left behind for one conversation."""

    dia_ids: list[str]  # turn order
    service_ranked: list[list[str]]  # per question: dia ids as the service ranked them (its default ranking)
    service_scores: list[list[float]]
    keyword_pools: list[list[str]]  # per question: dia ids from the service's keyword search (stop words dropped)
    doc_vectors: np.ndarray  # (turns, d), the vectors the service stored
    query_vectors: np.ndarray  # (questions, d), the vectors the service searched with
    vector_ranked: list[list[str]] = field(default_factory=list)  # the same service with lexical weight 0
    vector_scores: list[list[float]] = field(default_factory=list)


@dataclass
class ModelRun:
    provider: str
    model: str
    dimension: int
    conversations: list[ConversationRun] = field(default_factory=list)
    ingest_s: float = 0.0
    query_s: float = 0.0
    query_latencies_s: list[float] = field(default_factory=list)
    vector_latencies_s: list[float] = field(default_factory=list)  # pure-vector recalls (weight 0)
    model_seconds: float = 0.0
    model_texts: int = 0
    cached_texts: int = 0

    def timing(self) -> dict[str, object]:
        return {
            "ingest_s": round(self.ingest_s, 3),
            "query_s": round(self.query_s, 3),
            "recall_latency": latency_summary_ms(self.query_latencies_s),
            "recall_latency_pure_vector": latency_summary_ms(self.vector_latencies_s),
            "model_embed_s": round(self.model_seconds, 3),
            "model_texts": self.model_texts,
            "texts_from_cache": self.cached_texts,
        }


def scope_for(conversation: Conversation) -> str:
    return f"custom:locomo-{conversation.sample_id}"


async def _ingest(service: MemoryService, conversation: Conversation, concurrency: int) -> list[str]:
    """Remember every turn concurrently (the service's writer coalesces them into batched commits)."""
    scope = scope_for(conversation)
    gate = asyncio.Semaphore(concurrency)

    async def one(text: str, timestamp_tag: str) -> str:
        async with gate:
            result = await service.remember(text, tags=["locomo", timestamp_tag], scope=scope)
            return result.memory_id

    texts = [turn.memory_text for turn in conversation.turns]
    tags = [f"session-{turn.session}" for turn in conversation.turns]
    return list(await asyncio.gather(*(one(t, tag) for t, tag in zip(texts, tags, strict=True))))


async def _query(
    service: MemoryService, conversation: Conversation, id_to_dia: dict[str, str], top_k: int,
    latencies: list[float],
) -> tuple[list[list[str]], list[list[float]]]:
    ranked: list[list[str]] = []
    scores: list[list[float]] = []
    scope = scope_for(conversation)
    for question in conversation.questions:
        start = time.perf_counter()
        result = await service.recall(question.question, top_k=top_k, scope=scope)
        elapsed = time.perf_counter() - start
        latencies.append(elapsed)
        ranked.append([id_to_dia.get(hit.id, "?") for hit in result.hits])
        scores.append([float(hit.score) for hit in result.hits])
    return ranked, scores


async def _keyword_pools(
    service: MemoryService, conversation: Conversation, id_to_dia: dict[str, str], pool: int
) -> list[list[str]]:
    """Lexical candidates as the service can produce them today (not timed: an experiment input)."""
    pools = []
    for question in conversation.questions:
        hits = await service.keyword_search(keyword_query(question.question), scope=scope_for(conversation), limit=pool)
        pools.append([id_to_dia.get(hit.id, "?") for hit in hits])
    return pools


async def run_model(
    provider: str,
    conversations: list[Conversation],
    *,
    top_k: int = 10,
    concurrency: int = 32,
    use_cache: bool = True,
    keyword_pool: int = 0,
    lexical_weight: float | None = None,
) -> ModelRun:
    """Ingest and query every conversation through a fresh service on a temporary LanceDB
    (``lexical_weight``: the ranking's, else the provider's default)."""
    with tempfile.TemporaryDirectory(prefix="locomo-") as tmp:
        settings = Settings(
            db_path=Path(tmp) / "lancedb", kanban_db=Path(tmp) / "kanban.sqlite3", embedding_provider=provider,
            rank_lexical_weight=lexical_weight,
        )
        embedder = CachingEmbedder(create_embedder(settings), use_cache=use_cache)
        run = ModelRun(provider, embedder.model, embedder.dimension)
        maps: list[dict[str, str]] = []
        async with MemoryService.open(settings, embedder=embedder) as service:
            for conversation in conversations:
                start = time.perf_counter()
                ids = await _ingest(service, conversation, concurrency)
                run.ingest_s += time.perf_counter() - start
                id_to_dia = {mid: turn.dia_id for mid, turn in zip(ids, conversation.turns, strict=True)}
                maps.append(id_to_dia)
                ranked, scores = await _query(service, conversation, id_to_dia, top_k, run.query_latencies_s)
                pools = await _keyword_pools(service, conversation, id_to_dia, keyword_pool) if keyword_pool else []
                run.conversations.append(
                    ConversationRun(
                        dia_ids=[t.dia_id for t in conversation.turns],
                        service_ranked=ranked,
                        service_scores=scores,
                        keyword_pools=pools,
                        doc_vectors=np.stack([embedder.documents[t.memory_text] for t in conversation.turns]),
                        query_vectors=np.stack([embedder.queries[q.question] for q in conversation.questions]),
                    )
                )
        run.query_s = sum(run.query_latencies_s)
        # The same table, the same service, ranking switched off: the pure-vector reference row.
        async with MemoryService.open(settings.model_copy(update={"rank_lexical_weight": 0.0}),
                                      embedder=embedder) as service:
            for conversation, id_to_dia, crun in zip(conversations, maps, run.conversations, strict=True):
                crun.vector_ranked, crun.vector_scores = await _query(
                    service, conversation, id_to_dia, top_k, run.vector_latencies_s)
        run.model_seconds = embedder.model_seconds
        run.model_texts = embedder.model_texts
        run.cached_texts = embedder.cache_hits
        await embedder.close()
    return run
