"""How the memory service calls its embedder: bounded waits, and a model that may still be loading.

Why: a provider that hung cost every remember and every recall the whole 10 s deadline, and the
server answered nothing until its model had loaded (docs/performance.md, 'Start-up' and 'A hanging
embedder'). Here:

- remember waits for its vector at most ``embedding_deadline_s``, a model still loading included,
  then fails with ``embedding_unavailable`` (nothing is written without a real vector);
- recall waits at most ``recall_embedding_budget_s`` (1 s) and otherwise answers from keyword
  search; its embedding is not cancelled but finishes in the background, so it still counts for the
  remote breaker and the local model's batch;
- recall falls back at once while the model loads or the remote breaker is open;
- the model can load in the background (``start_loading``) while the server already answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import numpy as np

from app.errors import AppError
from app.memory.embeddings import Embedder, EmbeddingError
from app.settings import Settings

logger = logging.getLogger(__name__)


class EmbeddingCalls:
    """The service's embedder, behind the deadline of a write and the budget of a search."""

    def __init__(self, embedder: Embedder, settings: Settings) -> None:
        self.embedder = embedder
        self.deadline_s = settings.embedding_deadline_s
        self.budget_s = settings.recall_embedding_budget_s
        self._loading: asyncio.Task[None] | None = None
        self._load_started: float | None = None
        self.load_seconds: float | None = None
        self.load_error: str | None = None  # why the last background load failed
        self._unfinished: set[asyncio.Task[Any]] = set()  # queries recall stopped waiting for

    # --- loading -------------------------------------------------------------------------------

    def start_loading(self) -> None:
        """Load the model in the background; calls made meanwhile wait for it (remember) or skip it (recall)."""
        if self._loading is None:
            self._load_started = time.perf_counter()
            self._loading = asyncio.create_task(self._load(), name="embedding-model-load")

    async def load(self) -> None:
        """Load now (or wait for the background load).

        Raises:
            EmbeddingError: the model could not be loaded.
        """
        self.start_loading()
        assert self._loading is not None  # noqa: S101 - start_loading just set it
        await asyncio.shield(self._loading)
        if self.load_error is not None:
            raise EmbeddingError(self.load_error)

    async def _load(self) -> None:
        try:
            await self.embedder.load()
        except AppError as exc:
            self.load_error = exc.message
            logger.error("the embedding model could not load: %s; remember answers embedding_unavailable and "
                         "recall uses keyword search until a later call loads it", exc.message)
            return
        self.load_error = None
        if self._load_started is not None:
            self.load_seconds = time.perf_counter() - self._load_started

    @property
    def loading(self) -> bool:
        return self._loading is not None and not self._loading.done()

    def status(self) -> dict[str, Any]:
        """The embedder's readiness facts plus whether its model is still loading."""
        state = {**self.embedder.status(), "loading": self.loading}
        if self.load_error is not None:
            state["error"] = self.load_error
        return state

    async def wait_loaded(self) -> None:
        """Return once the background load has ended (loaded or failed); at once if none runs."""
        if self._loading is not None:
            await asyncio.shield(self._loading)

    # --- calls ---------------------------------------------------------------------------------

    async def document(self, text: str) -> np.ndarray:
        """The vector of one text to store, within the write deadline.

        Raises:
            EmbeddingError: the embedder failed or did not answer in time; nothing may be written.
        """
        try:
            if self.embedder.enforces_deadline:
                vectors = await self.embedder.embed_documents([text])
            else:
                async with asyncio.timeout(self.deadline_s):
                    vectors = await self.embedder.embed_documents([text])
        except TimeoutError:
            why = "the embedding model is still loading" if self.loading else "the embedder is busy"
            raise EmbeddingError(f"no embedding within the {self.deadline_s:g}s deadline ({why}); nothing was written",
                                 retry_after_s=1) from None
        except AppError:
            raise
        except Exception as exc:  # a provider bug must still read as "embedder down", never a 500
            raise EmbeddingError(f"embedding failed ({type(exc).__name__}); nothing was written") from exc
        return self.embedder.validate(vectors, 1)[0]  # never a zero/NaN vector, whatever the provider

    async def query(self, text: str) -> np.ndarray:
        """The vector of a search query, however long it takes.

        Raises:
            EmbeddingError: the embedder failed.
        """
        try:
            vector = await self.embedder.embed_query(text)
        except AppError:
            raise
        except Exception as exc:  # noqa: BLE001 - see document()
            raise EmbeddingError(f"embedding failed ({type(exc).__name__})") from exc
        return self.embedder.validate(vector, 1)[0]

    async def query_within_budget(self, text: str) -> np.ndarray | EmbeddingError:
        """The query vector if it comes within the recall budget, else why not (the caller falls back).

        Never waits while the model loads or the remote breaker is open; a query that is late keeps
        going in the background rather than being cancelled.
        """
        if not self.embedder.ready:
            why = "the embedding model is still loading" if self.loading else "the embedder is unavailable"
            return EmbeddingError(why)
        task = asyncio.ensure_future(self.query(text))
        try:
            done, _ = await asyncio.wait({task}, timeout=self.budget_s)
        finally:
            if not task.done():
                self._unfinished.add(task)
                task.add_done_callback(self._finished)
        if not done:
            return EmbeddingError(f"no query embedding within the {self.budget_s:g}s recall budget")
        try:
            return task.result()
        except EmbeddingError as exc:
            return exc

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._unfinished.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: its failure was counted by the embedder, nobody waits for it

    async def close(self) -> None:
        """Stop what still runs in the background (late queries, a load)."""
        pending = [*self._unfinished, *([self._loading] if self.loading and self._loading else [])]
        for task in pending:
            task.cancel()
        for task in pending:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
