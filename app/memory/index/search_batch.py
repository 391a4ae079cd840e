"""One thread answers every vector-cache search, coalescing the searches queued meanwhile.

Why: one search reads the whole matrix; it is memory-bound, so k concurrent searches (every
remember runs a duplicate check) done one by one read it k times, each in its own thread, and
OpenBLAS's own threads oversubscribe two cores, so a search under load took several times as long
as alone (docs/performance.md, 'The search thread'). Here the searches that arrive while one
product runs wait for the next one, which answers all of them with ONE (k x d) . (d x n) product,
so a burst of searches costs about one matrix pass plus k partial sorts.

BLAS always runs on one thread: OpenBLAS's own threads spin between calls, so two of them cost a
lone recall twice the CPU for the same latency (docs/performance.md, 'The search thread'). Instead,
on large tables, a helper thread of ours computes half of each product's columns while this
thread computes the other half, so a search still uses both cores and then lets them go.

The version check runs in this thread too, once per batch and after every search in it was
submitted: a write acknowledged before a search was submitted is always seen.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from threadpoolctl import ThreadpoolController

from app.memory.index.exact_top import Query
from app.memory.index.vector_cache import VectorCache

logger = logging.getLogger(__name__)

MAX_BATCH = 64  # bounds the (k x n) score block: 64 x 100k float32 = 25 MB
IDLE_S = 2.0  # the thread exits when idle, so a closed store's cache can be freed
_BLAS = ThreadpoolController()

Answer = list[dict[str, Any]] | None


@dataclass
class _Search:
    vector: np.ndarray
    scope: str | None
    limit: int
    min_score: float | None = None
    columns: tuple[str, ...] | None = None
    future: Future[Answer] = field(default_factory=Future)


class SearchBatcher:
    """Micro-batcher in front of one ``VectorCache``; ``submit`` is thread-safe and never blocks."""

    def __init__(self, cache: VectorCache, current_version: Callable[[], int], refresh: Callable[[], None]) -> None:
        self.cache = cache
        self._current_version = current_version
        self._refresh = refresh  # brings the cache up to date after another process's write (may leave it stale)
        self._cond = threading.Condition()
        self._pending: list[_Search] = []
        self._thread: threading.Thread | None = None
        self.batches = 0
        self.searches = 0
        self.largest_batch = 0

    def submit(self, vector: np.ndarray, scope: str | None, limit: int, min_score: float | None = None,
               columns: tuple[str, ...] | None = None) -> Future[Answer]:
        """Queue one search; the future gives rows best first (only ``columns`` of them if given), or
        None (ask LanceDB instead)."""
        search = _Search(np.asarray(vector, dtype=np.float32), scope, limit, min_score, columns)
        with self._cond:
            self._pending.append(search)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="memory-vector-search", daemon=True)
                self._thread.start()
            self._cond.notify()
        return search.future

    def search(self, vector: np.ndarray, scope: str | None, limit: int, min_score: float | None = None) -> Answer:
        """Blocking form of ``submit`` for worker threads."""
        return self.submit(vector, scope, limit, min_score).result()

    def _run(self) -> None:
        helper = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memory-vector-search-half")
        try:
            self._serve(helper)
        finally:
            helper.shutdown(wait=False)

    def _serve(self, helper: ThreadPoolExecutor) -> None:
        while True:
            with self._cond:
                if not self._pending:
                    self._cond.wait(IDLE_S)
                if not self._pending:
                    self._thread = None
                    return
                batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
            # A caller that went away (its task cancelled the future) is dropped; the others can no
            # longer be cancelled, so setting their results below cannot fail.
            batch = [s for s in batch if s.future.set_running_or_notify_cancel()]
            if batch:
                self._answer(batch, helper)

    def _answer(self, batch: list[_Search], helper: ThreadPoolExecutor) -> None:
        self.batches += 1
        self.searches += len(batch)
        self.largest_batch = max(self.largest_batch, len(batch))
        try:
            answers = self._search(batch, helper)
        except Exception:  # noqa: BLE001 - the callers fall back to LanceDB, which is always exact
            logger.exception("vector cache search failed; the callers fall back to LanceDB")
            answers = [None] * len(batch)
        for search, answer in zip(batch, answers, strict=True):
            search.future.set_result(answer)

    def _search(self, batch: list[_Search], helper: ThreadPoolExecutor) -> list[Answer]:
        version = self._current_version()
        if not self.cache.is_current(version):
            self._refresh()  # another process wrote: take that in, then answer if the cache is current
            version = self._current_version()
        queries = [Query(s.vector, s.scope, s.limit, s.min_score, s.columns) for s in batch]
        with _BLAS.limit(limits=1, user_api="blas"):
            return self.cache.search_many(queries, version, helper)
