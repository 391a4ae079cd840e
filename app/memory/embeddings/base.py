"""The embedding provider interface every backend implements."""

from __future__ import annotations

import abc
from collections.abc import Sequence

import numpy as np

from app.errors import Unavailable


class EmbeddingError(Unavailable):
    """The provider failed or returned something unusable; nothing may be written."""

    code = "embedding_unavailable"


class Embedder(abc.ABC):
    """Turns text into unit-length float32 vectors.

    Documents and queries are separate calls because asymmetric models (e5, Jina) embed them
    differently. Implementations must never return zero, NaN or wrongly sized vectors:
    ``validate`` enforces that for them.
    """

    name: str
    model: str
    dimension: int

    @abc.abstractmethod
    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Return a ``(len(texts), dimension)`` float32 array of unit vectors.

        Raises:
            EmbeddingError: the provider failed; the caller must write nothing.
        """

    @abc.abstractmethod
    async def embed_query(self, text: str) -> np.ndarray:
        """Return one ``(dimension,)`` float32 unit vector for a search query.

        Raises:
            EmbeddingError: the provider failed.
        """

    async def load(self) -> None:  # noqa: B027 - optional hook, most providers need nothing
        """Load weights or open clients; called once at start-up, off the request path."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release clients and threads."""

    @property
    def identity(self) -> dict[str, str]:
        """What is recorded in the table metadata so vectors never mix models."""
        return {"provider": self.name, "model": self.model, "dimension": str(self.dimension)}

    def validate(self, vectors: np.ndarray, expected_rows: int) -> np.ndarray:
        """Check shape and finiteness, normalise to unit length, or raise ``EmbeddingError``."""
        array = np.asarray(vectors, dtype=np.float32)
        if array.ndim == 1:
            array = array.reshape(1, -1)
        if array.shape != (expected_rows, self.dimension):
            raise EmbeddingError(
                f"embedding provider {self.name} ({self.model}) returned shape {tuple(array.shape)}, "
                f"expected ({expected_rows}, {self.dimension})"
            )
        if not np.all(np.isfinite(array)):
            raise EmbeddingError(f"embedding provider {self.name} ({self.model}) returned NaN or infinity")
        norms = np.linalg.norm(array, axis=1, keepdims=True)
        if np.any(norms < 1e-6):
            raise EmbeddingError(f"embedding provider {self.name} ({self.model}) returned a zero vector")
        return array / norms
