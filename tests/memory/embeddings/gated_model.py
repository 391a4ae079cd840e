"""A local model whose load waits for the test: the start-up and model-loading tests hold it back."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from app.memory.embeddings.hashing import HashEmbedder
from app.memory.embeddings.local_base import LocalModelEmbedder


class GatedModel(LocalModelEmbedder):
    """Hash vectors (so results are checkable) on the real worker thread and batcher, in process.

    ``_load_model`` blocks until ``allow_load`` is set, each batch until ``allow_encode`` is (it is at
    first); ``embed_requested`` is set by every embedding call as it arrives, so a test knows a request
    is waiting before it lets the model go on; ``encoded_event`` is set after each batch.
    """

    name = "gated"
    model = "gated-v1"
    dimension = 64
    symmetric = True

    def __init__(self) -> None:
        super().__init__(max_batch=16)
        self.allow_load = threading.Event()
        self.allow_encode = threading.Event()
        self.allow_encode.set()
        self.embed_requested = threading.Event()
        self.encoded_event = threading.Event()
        self.encoded: list[list[str]] = []

    def _load_model(self) -> Any:
        if not self.allow_load.wait(60):
            raise RuntimeError("the test never let the model load")
        return HashEmbedder(self.dimension)

    def _encode(self, model: Any, kind: str, texts: list[str]) -> np.ndarray:
        if not self.allow_encode.wait(60):
            raise RuntimeError("the test never let the batch run")
        vectors = np.stack([model._vector(text) for text in texts])
        self.encoded.append(list(texts))
        self.encoded_event.set()
        return vectors

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        self.embed_requested.set()
        return await super().embed_documents(texts)

    async def embed_query(self, text: str) -> np.ndarray:
        self.embed_requested.set()
        return await super().embed_query(text)
