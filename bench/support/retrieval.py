"""Retrieval quality through the real ``MemoryService``: LoCoMo and the bilingual set remembered and recalled
(``run_model``, ``run_bilingual``), and the metrics (recall@k per LoCoMo category, MRR and R@k per query type)."""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from app.memory.embeddings.registry import create_embedder
from app.memory.ranking import keyword_query
from app.memory.service import MemoryService
from app.settings import Settings
from bench.data.bilingual import BilingualSet
from bench.data.locomo import CATEGORY_NAMES, Conversation, dataset_path
from bench.support.common import CachingEmbedder, latency_summary_ms, measure_and_write

KS = (1, 5, 10)


def hit_at_k(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    """1.0 when at least one relevant item is in the first ``k`` results (the 'any-hit' recall@k)."""
    return 1.0 if any(item in relevant for item in ranked[:k]) else 0.0


def fraction_at_k(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    """Fraction of the relevant items found in the first ``k`` results (the 'evidence-fraction' recall@k)."""
    if not relevant:
        return 0.0
    return len(set(ranked[:k]) & set(relevant)) / len(relevant)


def overlap_at_k(a: Sequence[str], b: Sequence[str], k: int) -> float:
    """|top-k(a) ∩ top-k(b)| / k: 1.0 when two searches return the same set of k results."""
    denominator = min(k, max(len(a[:k]), len(b[:k]), 1))
    return len(set(a[:k]) & set(b[:k])) / denominator


@dataclass(frozen=True)
class Judged:
    """One question's ranked result ids next to its evidence ids."""

    category: int
    ranked: Sequence[str]
    evidence: frozenset[str]


def _summary(items: Sequence[Judged]) -> dict[str, float]:
    n = len(items)
    out: dict[str, float] = {"n": n}
    for k in KS:
        out[f"hit@{k}"] = round(sum(hit_at_k(j.ranked, j.evidence, k) for j in items) / n, 4) if n else 0.0
        out[f"frac@{k}"] = round(sum(fraction_at_k(j.ranked, j.evidence, k) for j in items) / n, 4) if n else 0.0
    return out


def summarise(judged: Iterable[Judged]) -> dict[str, dict[str, float]]:
    """{'all': {...}, 'multi-hop': {...}, ...}; hit@k = any evidence in top-k, frac@k = mean evidence share."""
    items = list(judged)
    by_category: dict[str, list[Judged]] = defaultdict(list)
    for item in items:
        by_category[CATEGORY_NAMES.get(item.category, str(item.category))].append(item)
    result = {"all": _summary(items)}
    for name in CATEGORY_NAMES.values():
        if by_category.get(name):
            result[name] = _summary(by_category[name])
    return result


def reciprocal_rank(ranked: Sequence[str], relevant: frozenset[str]) -> float:
    """1 / rank of the first relevant item, 0 when none is in the list."""
    return next((1.0 / rank for rank, item in enumerate(ranked, 1) if item in relevant), 0.0)


def typed_summary(judged: Iterable[tuple[str, Sequence[str], frozenset[str]]],
                  groups: dict[str, Sequence[str]] | None = None) -> dict[str, dict[str, float]]:
    """MRR and R@1/5/10 (share of the relevant items in the top k) per query type, for every type,
    for named groups of types (e.g. cross-language) and for 'all'."""
    items = list(judged)
    by_type: dict[str, list[tuple[Sequence[str], frozenset[str]]]] = defaultdict(list)
    for kind, ranked, relevant in items:
        by_type[kind].append((ranked, relevant))
        by_type["all"].append((ranked, relevant))
    for name, kinds in (groups or {}).items():
        by_type[name] = [pair for kind in kinds for pair in by_type.get(kind, [])]
    out = {}
    for kind, pairs in by_type.items():
        n = len(pairs)
        if not n:
            continue  # a group none of whose types is among these queries
        row: dict[str, float] = {"n": n, "mrr": round(sum(reciprocal_rank(r, rel) for r, rel in pairs) / n, 4)}
        for k in KS:
            row[f"r@{k}"] = round(sum(fraction_at_k(r, rel, k) for r, rel in pairs) / n, 4)
        out[kind] = row
    return out


MISSING_DATASET = """LoCoMo not found at {path}.
The quality benchmark reads the public LoCoMo release (locomo10.json); it is not shipped with this repository.
Put the file there, or point MEMORY_MCP_LOCOMO at it:  MEMORY_MCP_LOCOMO=/path/to/locomo10.json make bench"""


def run_on_dataset(args: argparse.Namespace, run: Callable[[argparse.Namespace], Awaitable[dict[str, Any]]],
                   show: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """Exit 2 with where to put LoCoMo when it is missing; else run, print and write the JSON."""
    if not dataset_path().is_file():
        print(MISSING_DATASET.format(path=dataset_path()), file=sys.stderr)
        raise SystemExit(2)
    return measure_and_write(args, run, show)


# --- LoCoMo through the service: one scope per conversation, every turn remembered -----------------------

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


# --- the bilingual set through the service: one scope, every query recalled twice --------------------

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
