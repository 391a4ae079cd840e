"""A deterministic embedder for fast unit tests: same text, same vector; never the default."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np

from app.memory.embeddings.base import Embedder
from app.memory.embeddings.registry import register
from app.settings import Settings

_TOKEN = re.compile(r"\w+", re.UNICODE)


class HashEmbedder(Embedder):
    """Bag of hashed word and character-bigram features, so overlapping texts score higher.

    Not semantic: it exists so tests can run without loading a model, with similarity that still
    behaves sensibly (identical text -> 1.0, shared words -> higher score).
    """

    name = "hash"
    model = "hash-bow-v1"
    default_dedup_threshold = 0.90

    def __init__(self, dimension: int = 256) -> None:
        self.dimension = dimension

    def _features(self, text: str) -> list[str]:
        lowered = text.lower()
        words = _TOKEN.findall(lowered)
        bigrams = [lowered[i : i + 2] for i in range(len(lowered) - 1) if not lowered[i : i + 2].isspace()]
        return words + bigrams or [lowered or " "]

    def _vector(self, text: str) -> np.ndarray:
        vector = np.zeros(self.dimension, dtype=np.float32)
        for feature in self._features(text):
            digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
            index = int.from_bytes(digest[:4], "little") % self.dimension
            sign = 1.0 if digest[4] & 1 else -1.0
            vector[index] += sign
        if not np.any(vector):
            vector[0] = 1.0
        return vector

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self.validate(np.stack([self._vector(t) for t in texts]), len(texts))

    async def embed_query(self, text: str) -> np.ndarray:
        return self.validate(self._vector(text), 1)[0]


@register("hash")
def _factory(settings: Settings) -> Embedder:
    return HashEmbedder(settings.embedding_dimensions or 256)
