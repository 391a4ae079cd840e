"""What the memory service loads after its table is open, and how far it got: the model, the vector cache.

The server answers before these loads end (app/startup.py): remember waits for the model within its
deadline, recall uses keyword search until the model is there, and searches use LanceDB until the
vector cache is (about a second at 100k rows; docs/performance.md, 'Start-up').
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from app.memory.embedding_calls import EmbeddingCalls
from app.memory.embeddings import Embedder, EmbeddingError

if TYPE_CHECKING:
    from app.memory.store import Store, Writer

#: How long ``wait`` waits for the first vector-cache load before it reports it as not finished.
CACHE_LOAD_WAIT_S = 600.0


class BackgroundLoads:
    """The model's load (``EmbeddingCalls``) and the first load of the store's vector cache."""

    def __init__(self, embedding: EmbeddingCalls, store: Store) -> None:
        self.embedding = embedding
        self.store = store
        self._opened_at = time.perf_counter()
        self.cache_seconds: float | None = None  # from the store's opening to its cache's first load
        self._cache_waited = False  # the first load ended (a failed one is retried by a later search)

    async def wait(self) -> None:
        """Return once both loads have ended, loaded or failed."""
        await self.embedding.wait_loaded()
        sync = self.store.sync
        if sync is not None and not self._cache_waited:
            await asyncio.to_thread(sync.wait_idle, CACHE_LOAD_WAIT_S)
            if self.store.cache is not None and self.store.cache.version is not None:
                self.cache_seconds = time.perf_counter() - self._opened_at
            self._cache_waited = True

    def pending(self) -> list[str]:
        """The loads still under way, by name (what ``/readyz`` lists)."""
        cache = self.store.cache
        cache_loading = cache is not None and cache.version is None and not self._cache_waited
        return [name for name, busy in (("model", self.embedding.loading), ("vector_cache", cache_loading)) if busy]

    def times(self) -> dict[str, float | None]:
        """Seconds each load took (None: failed or not finished)."""
        return {"model": self.embedding.load_seconds, "vector cache": self.cache_seconds}


def dimension_known(embedder: Embedder) -> bool:
    """Whether the table's schema can be built before the model loads (a remote provider may ask first)."""
    try:
        return embedder.dimension > 0
    except EmbeddingError:
        return False


def store_classes() -> tuple[type[Store], type[Writer]]:
    """``Store`` and ``Writer``, imported on first use: they import LanceDB, about two seconds."""
    from app.memory.store import Store, Writer

    return Store, Writer
