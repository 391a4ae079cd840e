"""Small local models for the model-process tests; the child imports this module by name."""

from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np

from app.memory.embeddings.hashing import HashEmbedder
from app.memory.embeddings.local_base import LocalModelEmbedder

CRASH = "crash the child"
HANG = "hang the child"
FAIL = "fail this batch"


class ScriptedModel(LocalModelEmbedder):
    """Hash vectors; certain texts make the child die, hang or raise, and every batch prints."""

    name = "scripted"
    model = "scripted-v1"
    dimension = 32
    symmetric = True

    def __init__(self, *, threads: int = 1, in_process: bool = True) -> None:
        super().__init__(max_batch=16, threads=threads, in_process=in_process)

    def _load_model(self) -> Any:
        if os.environ.get("SCRIPTED_MODEL_BROKEN"):
            raise RuntimeError("the weights file is missing")
        return HashEmbedder(self.dimension)

    def _encode(self, model: Any, kind: str, texts: list[str]) -> np.ndarray:
        print(f"encoding {len(texts)} texts")  # noqa: T201 - a chatty library must not break the protocol
        if CRASH in texts:
            os._exit(7)
        if HANG in texts:
            threading.Event().wait()
        if FAIL in texts:
            raise ValueError("the tokenizer rejected a text")
        return np.stack([model._vector(text) for text in texts]) * 3.0  # not unit length: validate() normalises
