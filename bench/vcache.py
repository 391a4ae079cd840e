"""Vectors cached on disk (``bench/cache/``, gitignored) so a model embeds each text once across runs.

``CachingEmbedder`` wraps a real embedder and is handed to ``MemoryService.open(..., embedder=...)``:
the service still stores exactly the model's vectors, and the benchmark gets them back for the exact
(numpy) reference without embedding anything twice.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from app.memory.embeddings.base import Embedder
from bench.common import CACHE_DIR


def _key(kind: str, text: str) -> str:
    return hashlib.sha1(f"{kind}\0{text}".encode()).hexdigest()


class VectorCache:
    """Digest -> vector for one model, loaded from and saved to two files (keys + matrix)."""

    def __init__(self, identity: dict[str, str], directory: Path | None = None) -> None:
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{identity['provider']}-{identity['model']}-{identity['dimension']}")
        self.directory = directory or CACHE_DIR
        self._keys_path = self.directory / f"{slug}.keys.txt"
        self._vectors_path = self.directory / f"{slug}.vectors.npy"
        self._index: dict[str, int] = {}
        self._saved = np.empty((0, int(identity["dimension"])), dtype=np.float32)
        self._pending: list[np.ndarray] = []
        if self._keys_path.exists() and self._vectors_path.exists():
            keys = self._keys_path.read_text(encoding="utf-8").split()
            vectors = np.load(self._vectors_path)
            if len(keys) == len(vectors):  # a torn write from an interrupted run is simply ignored
                self._index = {k: i for i, k in enumerate(keys)}
                self._saved = vectors

    def __len__(self) -> int:
        return len(self._index)

    def _row(self, i: int) -> np.ndarray:
        if i < len(self._saved):
            return self._saved[i]
        return self._pending[i - len(self._saved)]

    def get(self, kind: str, texts: Sequence[str]) -> list[np.ndarray | None]:
        return [self._row(i) if (i := self._index.get(_key(kind, t))) is not None else None for t in texts]

    def put(self, kind: str, texts: Sequence[str], vectors: np.ndarray) -> None:
        for text, vector in zip(texts, vectors, strict=True):
            key = _key(kind, text)
            if key not in self._index:
                self._index[key] = len(self._index)
                self._pending.append(np.asarray(vector, dtype=np.float32))

    def save(self) -> None:
        """Write everything added since loading (whole files: simple, and fine at 10^5 rows)."""
        if not self._pending:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        self._saved = np.vstack([self._saved, np.stack(self._pending)])
        self._pending = []
        keys = sorted(self._index, key=self._index.__getitem__)
        np.save(self._vectors_path, self._saved)
        self._keys_path.write_text("\n".join(keys) + "\n", encoding="utf-8")


class CachingEmbedder(Embedder):
    """Delegates to ``inner`` for texts not yet cached; remembers every vector it returned."""

    def __init__(self, inner: Embedder, cache: VectorCache | None = None, *, use_cache: bool = True) -> None:
        self.inner = inner
        self.name = inner.name
        self.model = inner.model
        self.dimension = inner.dimension
        self.default_dedup_threshold = getattr(inner, "default_dedup_threshold", 0.9)
        self.cache = cache or VectorCache(inner.identity)
        self.use_cache = use_cache
        self.model_seconds = 0.0  # wall time with at least one real model call in flight (not cache lookups)
        self._in_flight = 0
        self._busy_since = 0.0
        self.model_texts = 0
        self.cache_hits = 0
        self.queries: dict[str, np.ndarray] = {}
        self.documents: dict[str, np.ndarray] = {}

    @property
    def identity(self) -> dict[str, str]:
        return self.inner.identity

    async def load(self) -> None:
        await self.inner.load()

    async def close(self) -> None:
        self.cache.save()
        await self.inner.close()

    async def _embed(self, kind: str, texts: Sequence[str]) -> np.ndarray:
        found = self.cache.get(kind, texts) if self.use_cache else [None] * len(texts)
        missing = [i for i, v in enumerate(found) if v is None]
        self.cache_hits += len(texts) - len(missing)
        if missing:
            self._in_flight += 1
            if self._in_flight == 1:
                self._busy_since = time.perf_counter()
            try:
                if kind == "q":
                    fresh = np.stack([await self.inner.embed_query(texts[i]) for i in missing])
                else:
                    fresh = await self.inner.embed_documents([texts[i] for i in missing])
            finally:
                self._in_flight -= 1
                if self._in_flight == 0:  # concurrent calls overlap: count their union, not their sum
                    self.model_seconds += time.perf_counter() - self._busy_since
            self.model_texts += len(missing)
            self.cache.put(kind, [texts[i] for i in missing], fresh)
            for i, vector in zip(missing, fresh, strict=True):
                found[i] = vector
        return np.stack([np.asarray(v, dtype=np.float32) for v in found])

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        vectors = await self._embed("d", texts)
        self.documents.update(zip(texts, vectors, strict=True))
        return vectors

    async def embed_query(self, text: str) -> np.ndarray:
        vector = (await self._embed("q", [text]))[0]
        self.queries[text] = vector
        return vector
