"""The memory service: one API for the REST and MCP front ends.

Writes go through the journal (``app/memory/journal``): acknowledged means durable in the journal, seen
by the next read, and folded into the table by the flusher about a second later. Reads run in worker
threads on the journaled view: the vector index (or LanceDB) with the journal's entries on top. A search
hit's ``score`` is what its list is ordered by, in [0, 1] (the hybrid of ``ranking.fuse``, the clipped cosine, or term
coverage for keyword search); ``similarity`` is the cosine similarity (``1 - cosine distance``) when
vectors were compared.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from app.errors import InvalidInput
from app.memory import categories, hit_list, hybrid, keyword, supersede
from app.memory.embedding_calls import EmbeddingCalls
from app.memory.embeddings import Embedder, EmbeddingError, create_embedder
from app.memory.errors import MemoryNotFound, ScopeForbidden, StoreBusy
from app.memory.loading import BackgroundLoads, dimension_known, store_classes
from app.memory.models import (
    DuplicateCheck,
    DuplicateMatch,
    EmbeddingInfo,
    Memory,
    MemoryHit,
    RecallResult,
    RememberResult,
    SimilarMemory,
    Stats,
)
from app.memory.ranking import vector_score
from app.memory.rows import new_row, revised_metadata, to_memory
from app.memory.scopes import GLOBAL, agent_of, agent_scope, check_scope, normalize_scope, writable_scopes
from app.memory.store import filters
from app.memory.store.recovery import RecoveryReport, health_fields, open_with_recovery
from app.memory.validation import (
    check_importance,
    check_limit,
    check_memory_id,
    check_offset,
    check_query,
    check_tags,
    check_text,
    split_category,
)
from app.settings import Settings

if TYPE_CHECKING:  # imported when a store opens (loading.store_classes): they import LanceDB
    from app.memory.journal.writer import JournalWriter
    from app.memory.store import Store

logger = logging.getLogger(__name__)

MAX_PAGE = 200
DUPLICATE_CANDIDATES = 5


class MemoryService:
    """Remember, recall, list, update and forget memories in the shared LanceDB table."""

    def __init__(self, settings: Settings, embedder: Embedder, store: Store, writer: JournalWriter,
                 embedding: EmbeddingCalls | None = None) -> None:
        self.settings = settings
        self.embedder = embedder
        self.embedding = embedding or EmbeddingCalls(embedder, settings)
        self.store = store
        self.writer = writer
        self.reader = writer.view  # every read sees the journal's writes
        self._in_flight = 0
        self.loads = BackgroundLoads(self.embedding, store)
        self.recovery: RecoveryReport | None = None  # set when open quarantined a damaged head

    @classmethod
    @asynccontextmanager
    async def open(cls, settings: Settings, embedder: Embedder | None = None, *,
                   background: bool = False) -> AsyncIterator[MemoryService]:
        """Load the embedder, open (or create) the table and the journal, start the flusher; flush on exit.

        ``background``: yield once the table is open, while the model and the vector cache load (remember
        waits for the model within its deadline, recall uses keyword search meanwhile, searches use
        LanceDB until the cache is loaded): the server's start-up.

        Raises:
            EmbeddingModelMismatch: the table holds vectors of another model or dimension.
            StoreUnrecoverable: no version of the table can be opened (see ``recovery``).
            EmbeddingError: the model could not be loaded (not with ``background``).
        """
        owned = embedder is None
        embedder = embedder or await asyncio.to_thread(create_embedder, settings)
        embedding = EmbeddingCalls(embedder, settings)
        try:
            embedding.start_loading()  # a model child starts now, while LanceDB is imported and the table opens
            # In a thread: the import takes about two seconds, during which the loop keeps answering.
            Store, JournalWriter = await asyncio.to_thread(store_classes)  # noqa: N806 - classes
            if not background or not dimension_known(embedder):  # the table's schema needs the dimension
                await embedding.load()
            # A damaged newest version (power loss) is quarantined and the previous one opened (P10).
            store, recovery = await asyncio.to_thread(
                open_with_recovery, settings, partial(Store.open, settings, embedder, load_cache=not background),
                Store.version)
            went_back = recovery is not None and bool(recovery.quarantined_versions)
            writer = await asyncio.to_thread(partial(JournalWriter.open, store, settings, table_went_back=went_back))
            writer.start()
            try:
                service = cls(settings, embedder, store, writer, embedding)
                service.recovery = recovery
                yield service
            finally:
                await writer.close()
                if store.sync is not None:  # the vector index is saved for the next start
                    await asyncio.to_thread(store.sync.close)
        finally:
            await embedding.close()
            if owned:
                await embedder.close()

    def health(self) -> dict[str, Any]:
        """Cheap readiness facts: no table scan."""
        embedder = self.embedding.status()
        loading = self.loads.pending()
        return {
            "ready": self.writer.alive and not loading,
            "loading": loading,
            "embedder": embedder,
            "provider": self.embedder.name,
            "model": self.embedder.model,
            "dimension": self.embedder.dimension,
            "table": self.settings.table,
            "journal": self.writer.status(),
            "index": self.store.index_status(),
            "table_damage": self.writer.flusher.damage,
            **health_fields(self.recovery),
        }

    async def index_mapped(self, timeout_s: float) -> bool:
        """Wait (at most ``timeout_s``) until the saved vector index is in memory, or known not to be usable:
        from then on recall answers from it at once, while the commits made since it was saved are read."""
        sync = self.store.sync
        return sync is None or await asyncio.to_thread(sync.wait_mapped, timeout_s)

    def change_marker(self) -> int:
        """A number that changes with every write this instance knows of: acknowledged (journaled, its own or
        read off the journal) or committed to the table by any writer, and again once the vector index has
        read another writer's commit (reads answer at the index's version). Blocking (a stat), cheap."""
        indexed = self.store.cache.version if self.store.cache is not None else None
        return hash((self.store.probe.current(), indexed, self.writer.seen_seq))

    # --- writes --------------------------------------------------------------------------------

    async def remember(self, content: str, tags: list[str] | None = None, agent: str | None = None,
                       importance: float = 0.7, *, scope: str | None = None, caller: str | None = None,
                       supersedes: str | None = None) -> RememberResult:
        """Embed and store a memory; a near-duplicate is reported, never blocked; ``supersedes``: see ``supersede``.

        Raises:
            InvalidInput: bad text, tags, importance, scope or ``supersedes`` id.
            ScopeForbidden: ``caller`` may not write that scope, or the replaced memory's.
            MemoryNotFound, AlreadySuperseded: about the memory ``supersedes`` names; nothing was written.
            EmbeddingError: the embedder failed; nothing was written.
            StoreBusy, JournalFull, JournalUnavailable: nothing was written.
        """
        text = check_text(content, self.settings)
        clean_tags = check_tags(tags, self.settings)
        weight = check_importance(importance)
        target = self._target_scope(scope, agent, caller)
        self._authorize(target, caller)
        if supersedes is not None:  # the same authorization as an update of the old memory
            self._authorize(supersede.check_replaceable(await self.get(supersedes)).scope, caller)
        with self._admitted():
            return await self._store_new(text, clean_tags, weight, target, agent, caller, supersedes)

    @contextmanager
    def _admitted(self) -> Iterator[None]:
        """Bound the writes in flight, embedding included: the write queue alone cannot see a slow embedder.

        Raises:
            StoreBusy: ``write_queue_max`` writes are already being embedded or committed.
        """
        if self._in_flight >= self.settings.write_queue_max:
            raise StoreBusy("the memory store is busy (too many writes in flight); retry", retry_after_s=1)
        self._in_flight += 1
        try:
            yield
        finally:
            self._in_flight -= 1

    async def _store_new(self, text: str, clean_tags: list[str], weight: float, target: str,
                         agent: str | None, caller: str | None, replaces: str | None) -> RememberResult:
        vector = await self.embedding.document(text)
        author = _agent_name(agent, caller, target)
        row = new_row(text, vector, target, clean_tags, weight, author, self.embedder.model, replaces)
        # The duplicate check runs while the row waits for its commit (it only informs the caller),
        # so a write's latency is the longer of the two, not their sum; the new row is excluded.
        check = asyncio.ensure_future(self._nearest_duplicate(vector, target, row["id"], text, replaces))
        try:
            [memory_id] = await self.writer.add([row])
            if replaces is not None:  # second, after the new row: see ``supersede`` for what a crash leaves
                await supersede.mark_replaced(self.reader, self.writer.update, replaces, memory_id)
        except BaseException:
            check.cancel()
            raise
        return RememberResult(memory_id=memory_id, duplicate=await self._duplicate_or_none(check))

    @staticmethod
    async def _duplicate_or_none(check: asyncio.Future[DuplicateMatch | None]) -> DuplicateMatch | None:
        """The check's answer; once the row is committed, a failed check must not turn it into an error."""
        try:
            return await check
        except Exception:  # noqa: BLE001 - the write is acknowledged; the hint is what is lost
            logger.exception("the duplicate check of a remembered memory failed")
            return None

    async def create(self, text: str, scope: str | None = None, category: str | None = None,
                     importance: float | None = None, *, caller: str | None = None,
                     supersedes: str | None = None) -> RememberResult:
        """The REST form of ``remember``: ``category`` is a storage category or tags joined by commas
        (``categories.from_tags`` picks the column's value; all of them stay tags)."""
        return await self.remember(text, split_category(category), None, 0.7 if importance is None else importance,
                                   scope=scope, caller=caller, supersedes=supersedes)

    async def update(self, memory_id: str, *, text: str | None = None, tags: list[str] | None = None,
                     importance: float | None = None, scope: str | None = None,
                     caller: str | None = None) -> Memory:
        """Change a memory in place: a text change re-embeds, anything else keeps the vector bit-exact.

        Raises:
            MemoryNotFound, InvalidInput, ScopeForbidden, EmbeddingError.
        """
        current = await self.get(memory_id)
        self._authorize(current.scope, caller)
        values: dict[str, Any] = {}
        metadata = dict(current.metadata)
        if scope is not None:
            values["scope"] = check_scope(scope)
            self._authorize(values["scope"], caller)
        if tags is not None:
            metadata["tags"] = check_tags(tags, self.settings)
            values["category"] = categories.from_tags(metadata["tags"])
        if importance is not None:
            values["importance"] = check_importance(importance)
        if text is not None:
            values["text"] = check_text(text, self.settings)
            values["vector"] = (await self.embedding.document(values["text"])).tolist()
            metadata["embedding_model"] = self.embedder.model
        if not values:
            return current
        values["metadata"] = revised_metadata(current, metadata, values)
        if await self.writer.update(current.id, values) == 0:
            raise MemoryNotFound(f"memory {memory_id!r} was deleted meanwhile")
        return await self.get(current.id)

    async def forget(self, memory_id: str, *, caller: str | None = None) -> None:
        """Delete a memory.

        Raises:
            MemoryNotFound: no memory has that id.
            ScopeForbidden: ``caller`` may not write the memory's scope.
        """
        current = await self.get(memory_id)
        self._authorize(current.scope, caller)
        await supersede.reinstate(self.reader, self.writer.update, current)  # first: a crash leaves both current
        if await self.writer.delete(current.id) == 0:
            raise MemoryNotFound(f"no memory with id {memory_id!r}")

    # --- reads ---------------------------------------------------------------------------------

    async def recall(self, query: str, top_k: int = 5, agent_filter: str | None = None, *, scope: str | None = None,
                     include_superseded: bool = False) -> RecallResult:
        """Best matches by meaning, ordered by ``score`` in [0, 1] (the hybrid of ``hybrid.py``, or the
        clipped cosine when its weight is 0), each with its cosine as ``similarity``, identical texts of a
        scope once (``hit_list``), no superseded ones unless asked; keyword search when the embedder fails,
        loads, or misses its budget."""
        check_query(query, self.settings)
        check_limit(top_k, "top_k")
        where = self._scope_filter(agent_filter, scope)
        refine = partial(supersede.current, self.reader, include_superseded)
        vector = await self.embedding.query_within_budget(query)
        if isinstance(vector, EmbeddingError):
            logger.warning("recall falls back to keyword search: %s", vector.message)
            hits = await hit_list.best_distinct(partial(self._keyword_rows, query, where), top_k, refine)
            return RecallResult(hits=hits, mode="keyword_fallback")
        weight = hybrid.lexical_weight(self.settings.rank_lexical_weight, self.embedder.name)
        pool_max = self.settings.rank_keyword_pool_max_rows

        async def fetch(limit: int) -> list[dict[str, Any]]:
            if weight:
                return await hybrid.search(self.reader, query, vector, where, limit, weight, pool_max)
            rows = await self.reader.vector_search_async(vector, where, limit)
            return [{**row, "similarity": row["score"], "score": vector_score(row["score"])} for row in rows]

        hits = await hit_list.best_distinct(fetch, top_k, refine)
        return RecallResult(hits=hits, mode="vector", catching_up=self.store.catching_up())

    async def keyword_search(self, query: str, scope: str | None = None, limit: int = 20, *,
                             include_superseded: bool = False) -> list[MemoryHit]:
        """Substring search (finds Chinese words and exact identifiers; see ``keyword``), listed as ``recall`` lists."""
        check_query(query, self.settings)
        check_limit(limit, "limit")
        rows = partial(self._keyword_rows, query, self._scope_filter(None, scope))
        return await hit_list.best_distinct(rows, limit, partial(supersede.current, self.reader, include_superseded))

    async def list_memories(self, scope: str | None = None, category: str | None = None,
                            limit: int = 30, offset: int = 0) -> list[Memory]:
        """Newest first; ``category``: a storage category (``categories``), else one tag exactly."""
        category_filter = None
        if category is not None:
            category_filter = (filters.category(category, categories.STORAGE_CATEGORIES)
                               if category in categories.STORAGE_CATEGORIES else filters.tag(category))
        where = filters.all_of(self._scope_filter(None, scope), category_filter)
        return await self._page(where, limit, offset)

    async def list_facts(self, agent: str | None = None, tag: str | None = None,
                         limit: int = 100, offset: int = 0) -> list[Memory]:
        """Exact filters: ``agent``'s scope, and ``tag`` as one element of the tag list; newest first."""
        tag_filter = None
        if tag is not None:
            [clean] = check_tags([tag], self.settings) or [""]
            tag_filter = filters.tag(clean)
        where = filters.all_of(self._scope_filter(agent, None), tag_filter)
        return await self._page(where, limit, offset)

    async def get(self, memory_id: str) -> Memory:
        """Raises: MemoryNotFound: no memory has that id; InvalidId: not an id."""
        check_memory_id(memory_id)
        rows = await asyncio.to_thread(self.reader.get_rows, [memory_id])
        if not rows:
            raise MemoryNotFound(f"no memory with id {memory_id!r}")
        return (await supersede.resolve(self.reader, [to_memory(rows[0])]))[0]

    async def check_duplicate(self, content: str, threshold: float | None = None) -> DuplicateCheck:
        """Memories whose cosine similarity to ``content`` reaches the threshold (warn only)."""
        text = check_text(content, self.settings)
        limit = self._threshold(threshold)
        vector = await self.embedding.document(text)
        rows = await self.reader.vector_search_async(vector, None, DUPLICATE_CANDIDATES, min_score=limit)
        similar = [SimilarMemory(memory_id=r["id"], content=r.get("text") or "", score=r["score"]) for r in rows]
        return DuplicateCheck(is_duplicate=bool(similar), threshold=limit, similar=similar,
                              hint=supersede.first_hint(rows, text))

    async def stats(self) -> Stats:
        """Counts per scope and per storage category (``categories``), and the embedding model."""
        table = await asyncio.to_thread(self.reader.scan_columns, None, ["scope", "category"])
        scopes = Counter(s or GLOBAL for s in table.column("scope").to_pylist())
        # Counted as ``filters.category`` matches, so each count is what that category's filter lists.
        per_category = Counter(categories.of_column(c) for c in table.column("category").to_pylist())
        version = await asyncio.to_thread(self.store.version)
        embedding = EmbeddingInfo(provider=self.embedder.name, model=self.embedder.model,
                                  dimension=self.embedder.dimension)
        return Stats(total=table.num_rows, scopes=dict(scopes), categories=dict(per_category), embedding=embedding,
                     table_version=version)

    # --- helpers -------------------------------------------------------------------------------

    async def _keyword_rows(self, query: str, where: str | None, limit: int) -> list[dict[str, Any]]:
        return await asyncio.to_thread(keyword.search, self.reader, query, where, limit)

    async def _page(self, where: str | None, limit: int, offset: int) -> list[Memory]:
        check_limit(limit, "limit", MAX_PAGE)
        check_offset(offset)
        keys = await asyncio.to_thread(self.reader.scan_columns, where, ["id", "timestamp"])
        order = sorted(zip(keys.column("timestamp").to_pylist(), keys.column("id").to_pylist(), strict=True),
                       key=lambda pair: (-(pair[0] or 0), pair[1]))
        ids = [memory_id for _, memory_id in order[offset : offset + limit]]
        rows = {r["id"]: r for r in await asyncio.to_thread(self.reader.get_rows, ids)}
        return await supersede.resolve(self.reader, [to_memory(rows[i]) for i in ids if i in rows])

    def _target_scope(self, scope: str | None, agent: str | None, caller: str | None) -> str:
        if scope is not None:
            return check_scope(scope)
        if agent is not None:
            return normalize_scope(agent)
        if caller is not None and not self.settings.agent_may_write_global:
            return agent_scope(caller)
        return GLOBAL

    def _authorize(self, scope: str, caller: str | None) -> None:
        allowed = writable_scopes(caller, self.settings.agent_may_write_global)
        if allowed is not None and scope not in allowed:
            raise ScopeForbidden(f"agent {caller!r} may only write {', '.join(sorted(allowed))}, not {scope!r}")

    def _scope_filter(self, agent: str | None, scope: str | None) -> str | None:
        if agent is not None:
            return filters.eq("scope", agent_scope(agent))
        if scope is not None:
            return filters.eq("scope", check_scope(scope))
        return None

    def _threshold(self, threshold: float | None) -> float:
        if threshold is not None:
            if isinstance(threshold, bool) or not math.isfinite(threshold) or not 0.0 <= threshold <= 1.0:
                raise InvalidInput("threshold must be a number between 0 and 1", code="invalid_threshold")
            return float(threshold)
        if self.settings.dedup_threshold is not None:
            return self.settings.dedup_threshold
        return float(getattr(self.embedder, "default_dedup_threshold", 0.9))

    async def _nearest_duplicate(self, vector: np.ndarray, scope: str, exclude: str, text: str,
                                 replaces: str | None) -> DuplicateMatch | None:
        """The best other row of ``scope`` at or above the threshold (``exclude``: the row being written)."""
        threshold = self._threshold(None)
        rows = await self.reader.vector_search_async(vector, filters.eq("scope", scope), 2, min_score=threshold,
                                                    columns=("id", "text", "metadata"))
        for row in rows:
            if row["id"] != exclude:
                return DuplicateMatch(memory_id=row["id"], score=round(row["score"], 6),
                                      hint=supersede.hint(row, text, replaces))
        return None

def _agent_name(agent: str | None, caller: str | None, scope: str) -> str | None:
    if agent is not None and agent.strip() != GLOBAL:
        return agent_of(normalize_scope(agent))
    return caller or agent_of(scope)
