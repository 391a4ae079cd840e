"""The embedding provider interface every backend implements."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from app.errors import Unavailable

#: Why an embedding failed: the provider could not be reached or answered with an error status
#: ("unavailable"), refused the request as a client error ("rejected"), or answered with vectors
#: that cannot be stored ("invalid"). The error ``code`` stays ``embedding_unavailable`` for all
#: three so clients match one code; ``reason`` is for logs and operators.
FailureReason = Literal["unavailable", "rejected", "invalid"]


class EmbeddingError(Unavailable):
    """The provider failed or returned something unusable; nothing may be written."""

    code = "embedding_unavailable"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        retry_after_s: float | None = None,
        reason: FailureReason = "unavailable",
    ) -> None:
        super().__init__(message, code=code, retry_after_s=retry_after_s)
        self.reason = reason
        #: True when the provider refused this request's content (HTTP 400/413/422), which says
        #: nothing about the provider's health.
        self.request_specific = False


class Embedder(abc.ABC):
    """Turns text into unit-length float32 vectors.

    Documents and queries are separate calls because asymmetric models (e5, Jina) embed them
    differently. Implementations must never return zero, NaN or wrongly sized vectors:
    ``validate`` enforces that for them.
    """

    name: str
    model: str
    dimension: int
    #: Cosine similarity at or above which ``check_duplicate`` calls two texts duplicates;
    #: calibrated per model because similarity scales differ (USE ~0.85, e5 ~0.95).
    default_dedup_threshold: float = 0.90
    #: Every call ends within a deadline of its own (remote providers); otherwise the caller bounds it.
    enforces_deadline: bool = False
    #: The settings are memory-lancedb-pro's own, from openclaw.json: its tables record no model, and
    #: that file names the one their vectors come from.
    settings_from_openclaw: bool = False

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
    def ready(self) -> bool:
        """True when an embedding call can start at once: the model is loaded and the provider is
        not known to be down. Recall falls back to keywords at once when it is False."""
        return True

    def status(self) -> dict[str, Any]:
        """What readiness reports about the embedder (cheap, no call to the provider)."""
        return {"ready": self.ready}

    @property
    def identity(self) -> dict[str, str]:
        """What is recorded in the table metadata so vectors never mix models."""
        return {"provider": self.name, "model": self.model, "dimension": str(self.dimension)}

    def _invalid(self, problem: str) -> EmbeddingError:
        return EmbeddingError(f"embedding provider {self.name} ({self.model}) {problem}", reason="invalid")

    def validate(self, vectors: np.ndarray, expected_rows: int) -> np.ndarray:
        """Check shape and finiteness, normalise to unit length, or raise ``EmbeddingError``."""
        try:
            array = np.asarray(vectors, dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise self._invalid("returned something that is not a numeric array") from exc
        if array.ndim == 1:
            array = array.reshape(1, -1)
        if array.ndim != 2 or array.shape[0] != expected_rows:
            raise self._invalid(f"returned {array.shape[0] if array.ndim else 0} vectors for {expected_rows} texts")
        if array.shape[1] != self.dimension:
            raise self._invalid(
                f"returned {array.shape[1]}-dimensional vectors, expected {self.dimension} "
                "(check the model and MEMORY_MCP_EMBEDDING_DIMENSIONS)"
            )
        if not np.all(np.isfinite(array)):
            raise self._invalid("returned NaN or infinity")
        norms = np.linalg.norm(array, axis=1, keepdims=True)
        if np.any(norms < 1e-6):
            raise self._invalid("returned a zero vector")
        return array / norms
