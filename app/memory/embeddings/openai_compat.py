"""Provider ``openai``: any OpenAI-compatible ``/v1/embeddings`` server.

Works with OpenAI, Ollama, vLLM, LM Studio, Hugging Face TEI or a local BGE-M3 server.

- ``MEMORY_MCP_EMBEDDING_BASE_URL`` (required): ``http://127.0.0.1:11434/v1``; a URL without
  ``/v1`` or ending in ``/embeddings`` is accepted too.
- ``MEMORY_MCP_EMBEDDING_MODEL`` (required): the server's model name.
- ``MEMORY_MCP_EMBEDDING_API_KEY`` (optional): sent as ``Authorization: Bearer``.
- ``MEMORY_MCP_EMBEDDING_DIMENSIONS`` (optional): when set it is the expected size and is sent as
  ``dimensions`` (OpenAI text-embedding-3 and Matryoshka models shorten to it; a server that
  cannot will say so or be caught by validation). When unset, ``load()`` makes one probe
  request and uses the model's native size; nothing extra is sent.

The API has no query/document distinction, so both embed the same way (prefix texts on the
server side if the model needs it).
"""

from __future__ import annotations

from typing import Any

from app.errors import InvalidInput
from app.memory.embeddings.base import Embedder
from app.memory.embeddings.breaker import breaker_for
from app.memory.embeddings.registry import register
from app.memory.embeddings.remote import RemoteEmbedder, embeddings_endpoint
from app.settings import Settings


class OpenAICompatEmbedder(RemoteEmbedder):
    """An OpenAI-shaped embeddings endpoint."""

    name = "openai"
    default_dedup_threshold = 0.90

    def __init__(self, *, requested_dimensions: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.requested_dimensions = requested_dimensions

    def _payload(self, texts: list[str], kind: str) -> dict[str, Any]:
        payload: dict[str, Any] = {"model": self.model, "input": texts}
        if self.requested_dimensions is not None:
            payload["dimensions"] = self.requested_dimensions
        return payload


@register("openai")
def _factory(settings: Settings) -> Embedder:
    base_url = (settings.embedding_base_url or "").strip()
    model = (settings.embedding_model or "").strip()
    missing = [name for name, value in (("MEMORY_MCP_EMBEDDING_BASE_URL", base_url),
                                        ("MEMORY_MCP_EMBEDDING_MODEL", model)) if not value]
    if missing:
        raise InvalidInput(
            f"embedding provider 'openai' needs {' and '.join(missing)} "
            "(e.g. http://127.0.0.1:11434/v1 and the server's model name)"
        )
    api_key = settings.embedding_api_key
    return OpenAICompatEmbedder(
        model=model,
        endpoint=embeddings_endpoint(base_url),
        api_key=api_key if api_key is not None and api_key.get_secret_value().strip() else None,
        dimension=settings.embedding_dimensions,
        requested_dimensions=settings.embedding_dimensions,
        timeout_s=settings.embedding_timeout_s,
        max_retries=settings.embedding_max_retries,
        batch_size=settings.embedding_batch_size,
        deadline_s=settings.embedding_deadline_s,
        breaker=breaker_for(settings),
    )
