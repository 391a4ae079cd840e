"""Provider ``jina``: Jina AI's hosted embeddings API.

``POST https://api.jina.ai/v1/embeddings`` with ``task`` ``retrieval.passage`` for stored text and
``retrieval.query`` for queries, ``normalized: true``, and ``dimensions`` when
``MEMORY_MCP_EMBEDDING_DIMENSIONS`` is set (Matryoshka truncation). The key comes from
``JINA_API_KEY`` or ``MEMORY_MCP_EMBEDDING_API_KEY``. ``MEMORY_MCP_EMBEDDING_BASE_URL`` overrides
the host (tests point it at a local fake server).
"""

from __future__ import annotations

from typing import Any

from app.errors import InvalidInput
from app.memory.embeddings.base import Embedder
from app.memory.embeddings.breaker import breaker_for
from app.memory.embeddings.registry import register
from app.memory.embeddings.remote import QUERY, RemoteEmbedder, embeddings_endpoint
from app.settings import Settings

DEFAULT_BASE_URL = "https://api.jina.ai/v1"
DEFAULT_MODEL = "jina-embeddings-v5-text-small"
# Native output sizes of models we know; any other model's size is discovered by load().
KNOWN_DIMENSIONS = {"jina-embeddings-v5-text-small": 1024, "jina-embeddings-v3": 1024}


class JinaEmbedder(RemoteEmbedder):
    """Jina embeddings over HTTPS, asymmetric via the ``task`` field."""

    name = "jina"
    default_dedup_threshold = 0.90

    def __init__(self, *, requested_dimensions: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.requested_dimensions = requested_dimensions

    def _payload(self, texts: list[str], kind: str) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "model": self.model,
            "task": "retrieval.query" if kind == QUERY else "retrieval.passage",
            "input": texts,
            "normalized": True,
            "embedding_type": "float",
        }
        if self.requested_dimensions is not None:
            payload["dimensions"] = self.requested_dimensions
        return payload


@register("jina")
def _factory(settings: Settings) -> Embedder:
    api_key = settings.jina_api_key or settings.embedding_api_key
    if api_key is None or not api_key.get_secret_value().strip():
        raise InvalidInput(
            "embedding provider 'jina' needs an API key: set JINA_API_KEY (or MEMORY_MCP_EMBEDDING_API_KEY), "
            "or choose MEMORY_MCP_EMBEDDING_PROVIDER=local for the offline model"
        )
    model = settings.embedding_model or DEFAULT_MODEL
    return JinaEmbedder(
        model=model,
        endpoint=embeddings_endpoint(settings.embedding_base_url or DEFAULT_BASE_URL),
        api_key=api_key,
        dimension=settings.embedding_dimensions or KNOWN_DIMENSIONS.get(model),
        requested_dimensions=settings.embedding_dimensions,
        timeout_s=settings.embedding_timeout_s,
        max_retries=settings.embedding_max_retries,
        batch_size=settings.embedding_batch_size,
        deadline_s=settings.embedding_deadline_s,
        breaker=breaker_for(settings),
    )
