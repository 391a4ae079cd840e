"""Shared plumbing of local models: one worker thread, micro-batching, lazy load, optional child process."""

from __future__ import annotations

import abc
import asyncio
import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from app.memory.embeddings.base import Embedder, EmbeddingError
from app.memory.embeddings.batching import MicroBatcher
from app.memory.embeddings.model_process import ModelProcess, ModelSpec

logger = logging.getLogger(__name__)

DOCUMENT = "document"
QUERY = "query"


#: Seconds one batch may take in a model child before it is deemed hung (a full batch normally takes
#: a fraction of a second; docs/performance.md, 'Model batch sizes and timeouts').
PROCESS_REPLY_TIMEOUT_S = 60.0


class LocalModelEmbedder(Embedder):
    """An embedder whose model runs locally: on one dedicated thread, or in a child process.

    Every model call (loading included) goes through a :class:`MicroBatcher`, so concurrent
    ``embed_documents`` calls from many clients become a few batched model calls, the event loop
    never runs model code, and the model is never used from two threads at once.
    Embedding before ``load()`` loads the model first (on the worker), so a forgotten ``load`` is
    slow once rather than broken. With ``in_process=False`` the worker thread only talks to a
    :class:`ModelProcess` child that holds the model (see ``model_process`` for why).
    """

    #: Symmetric models embed queries like documents, so queries may share a batch with them.
    symmetric: bool = False

    def __init__(self, *, max_batch: int, threads: int = 1, in_process: bool = True) -> None:
        self.threads = threads
        self.in_process = in_process
        self._model: Any = None
        self._load_lock = threading.Lock()
        self.load_seconds: float | None = None
        self.load_error: str | None = None  # why the last load failed (the next call tries again)
        self.batcher = MicroBatcher(self._encode_on_worker, max_batch=max_batch, thread_name=f"embed-{self.name}")

    @abc.abstractmethod
    def _load_model(self) -> Any:
        """Build the model object (worker thread)."""

    @abc.abstractmethod
    def _encode(self, model: Any, kind: str, texts: list[str]) -> np.ndarray:
        """Embed ``texts`` as documents or queries (worker thread)."""

    def _ensure_model(self) -> Any:
        with self._load_lock:  # only the worker calls this; the lock documents the invariant
            if self._model is None:
                started = time.perf_counter()
                try:
                    self._model = self._load_model() if self.in_process else self._start_process()
                except EmbeddingError as exc:
                    self.load_error = exc.message
                    raise
                except Exception as exc:
                    self.load_error = f"could not load: {type(exc).__name__}: {exc}"
                    raise EmbeddingError(f"embedding provider {self.name} ({self.model}) {self.load_error}") from exc
                self.load_error = None
                self.load_seconds = time.perf_counter() - started
                logger.info("loaded embedding model %s (%s) in %.2fs", self.name, self.model, self.load_seconds)
            return self._model

    def _start_process(self) -> ModelProcess:
        spec = ModelSpec(type(self).__module__, type(self).__qualname__, self._child_kwargs())
        process = ModelProcess(spec, reply_timeout_s=PROCESS_REPLY_TIMEOUT_S)
        process.start()
        return process

    def _child_kwargs(self) -> dict[str, Any]:
        """The keyword arguments (JSON values) that rebuild this embedder, in process, in the child."""
        return {"threads": self.threads}

    @property
    def process_pid(self) -> int | None:
        """The model child's pid while one runs (``in_process=False``), else None."""
        return self._model.pid if isinstance(self._model, ModelProcess) else None

    def _encode_on_worker(self, kind: str, texts: list[str]) -> np.ndarray:
        model = self._ensure_model()
        if isinstance(model, ModelProcess):
            return model.encode(kind, texts)  # raises EmbeddingError with the child's message
        try:
            return self._encode(model, kind, texts)
        except Exception as exc:
            raise EmbeddingError(
                f"embedding provider {self.name} ({self.model}) failed: {type(exc).__name__}: {exc}"
            ) from exc

    @property
    def loaded(self) -> bool:
        return self._model is not None

    @property
    def ready(self) -> bool:
        return self._model is not None

    def status(self) -> dict[str, Any]:
        state = {**super().status(), "load_seconds": self.load_seconds}
        if self.load_error is not None:
            state["error"] = self.load_error
        return state

    async def load(self) -> None:
        """Load the weights on the worker thread; idempotent.

        Raises:
            EmbeddingError: the model could not be loaded.
        """
        await self.batcher.run(self._ensure_model)

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.empty((0, self.dimension), dtype=np.float32)
        rows = await self.batcher.submit(DOCUMENT, texts)
        return self.validate(rows, len(texts))

    async def embed_query(self, text: str) -> np.ndarray:
        rows = await self.batcher.submit(DOCUMENT if self.symmetric else QUERY, [text])
        return self.validate(rows, 1)[0]

    async def close(self) -> None:
        await self.batcher.close()
        model, self._model = self._model, None
        if isinstance(model, ModelProcess):
            await asyncio.to_thread(model.close)
