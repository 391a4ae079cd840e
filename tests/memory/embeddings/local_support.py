"""Helpers shared by the local-model tests: no-network loading and an event-loop probe."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

from app.memory.embeddings.local_base import LocalModelEmbedder

ZH = "memory-mcp timestamp 必須用毫秒，與 OpenClaw 格式一致"
EN_PARAPHRASE = "timestamps must be in milliseconds to match OpenClaw"
UNRELATED = "the cat slept on a warm windowsill all afternoon"


def _refuse(*_args: Any, **_kwargs: Any) -> None:
    raise OSError("network access during model load")


@contextmanager
def no_network() -> Iterator[None]:
    """Any outbound connection raises, so a model that tries to download fails loudly."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket.socket, "connect", _refuse)
        patch.setattr(socket.socket, "connect_ex", _refuse)
        patch.setattr(socket, "getaddrinfo", _refuse)
        yield


def load_offline(embedder: LocalModelEmbedder) -> LocalModelEmbedder:
    """Load in a private event loop (module-scoped fixtures outlive a test's loop)."""
    with no_network():
        asyncio.run(embedder.load())
    return embedder


class EncodeSpy:
    """Wraps ``_encode``: which threads ran it, overlap, and event-loop ticks during each call."""

    def __init__(self, embedder: LocalModelEmbedder) -> None:
        self.embedder = embedder
        self.original = embedder._encode
        self.ticks = 0
        self.ticks_while_encoding = 0
        self.threads: set[int] = set()
        self.active = 0
        self.max_active = 0
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self, model: Any, kind: str, texts: list[str]) -> np.ndarray:
        with self._lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            self.calls += 1
        self.threads.add(threading.get_ident())
        start = self.ticks
        try:
            return self.original(model, kind, texts)
        finally:
            self.ticks_while_encoding += self.ticks - start
            with self._lock:
                self.active -= 1

    async def tick_until(self, done: asyncio.Event) -> None:
        """Count event-loop turns; a loop blocked by model code would count none meanwhile."""
        while not done.is_set():
            self.ticks += 1
            await asyncio.sleep(0)


async def embed_while_ticking(embedder: LocalModelEmbedder, spy: EncodeSpy, texts: list[str]) -> np.ndarray:
    done = asyncio.Event()
    ticker = asyncio.create_task(spy.tick_until(done))
    try:
        return await embedder.embed_documents(texts)
    finally:
        done.set()
        await ticker
