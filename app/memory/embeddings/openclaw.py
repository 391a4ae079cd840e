"""Embed exactly as OpenClaw's memory-lancedb-pro does, when its config sets it up on our table.

The request mirrors the plugin's ``Embedder.buildPayload`` (its ``src/embedder.ts``): a provider
profile chosen from the base URL's host, else the model name, decides which fields go out
(``encoding_format``, ``normalized``, the task field and its values, the dimensions field), and the
OpenAI SDK's URL rule applies (``<baseURL>/embeddings``; no baseURL: ``OPENAI_BASE_URL``, else
OpenAI). ``MEMORY_MCP_EMBEDDING_PROVIDER`` set explicitly ignores the plugin's settings; the
``MEMORY_MCP_EMBEDDING_MODEL`` / ``_BASE_URL`` / ``_API_KEY`` / ``_DIMENSIONS`` each win over theirs.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from pydantic import SecretStr

from app.memory.embeddings.base import Embedder
from app.memory.embeddings.breaker import breaker_for
from app.memory.embeddings.openclaw_config import OpenClawConfigError, PluginEmbedding, load_plugin_embedding
from app.memory.embeddings.remote import QUERY, RemoteEmbedder
from app.settings import Settings

logger = logging.getLogger(__name__)

OPENAI_BASE_URL = "https://api.openai.com/v1"
_OLLAMA = re.compile(r"localhost:11434|127\.0\.0\.1:11434|/ollama\b", re.IGNORECASE)
_QWEN3 = re.compile(r"qwen3[-_]embedding", re.IGNORECASE)
_QWEN3_QUERY_TASK = "Given a memory search query, retrieve relevant stored knowledge entries that match the query"


@dataclasses.dataclass(frozen=True)
class Profile:
    """The plugin's getEmbeddingCapabilities for one provider profile."""

    name: str
    encoding_format: bool = True
    normalized: bool = False
    task_field: str | None = None
    task_values: dict[str, str] = dataclasses.field(default_factory=dict)
    dimensions_field: str | None = "dimensions"


_VOYAGE_TASKS = {"retrieval.query": "query", "retrieval.passage": "document", "query": "query",
                 "passage": "document", "document": "document"}
_NVIDIA_TASKS = {"retrieval.query": "query", "retrieval.passage": "passage", "query": "query", "passage": "passage"}
PROFILES = {
    "openai": Profile("openai"),
    "azure-openai": Profile("azure-openai"),
    "jina": Profile("jina", normalized=True, task_field="task"),
    "voyage-compatible": Profile("voyage-compatible", encoding_format=False, task_field="input_type",
                                 task_values=_VOYAGE_TASKS, dimensions_field="output_dimension"),
    "nvidia": Profile("nvidia", task_field="input_type", task_values=_NVIDIA_TASKS),
    "generic-openai-compatible": Profile("generic-openai-compatible"),
}


def detect_profile(base_url: str | None, model: str) -> Profile:
    """The plugin's detectEmbeddingProviderProfile: the endpoint's host first, then the model's name."""
    host = (urlsplit(base_url or "").hostname or "").lower()
    for suffix, name in (("api.openai.com", "openai"), (".openai.azure.com", "azure-openai"),
                         ("api.jina.ai", "jina"), ("api.voyageai.com", "voyage-compatible")):
        if host.endswith(suffix):
            return PROFILES[name]
    if host.endswith(".nvidia.com") or host == "nvidia.com":
        return PROFILES["nvidia"]
    for pattern, name in ((r"^jina-", "jina"), (r"^voyage\b", "voyage-compatible"),
                          (r"^nvidia/|^nv-embed", "nvidia")):
        if re.search(pattern, model, re.IGNORECASE):
            return PROFILES[name]
    return PROFILES["generic-openai-compatible"]


class OpenClawEmbedder(RemoteEmbedder):
    """The plugin's request, field for field; vectors are stored unit length like every memory-mcp vector."""

    default_dedup_threshold = 0.90
    settings_from_openclaw = True

    def __init__(self, *, plugin: PluginEmbedding, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.plugin = plugin
        self.profile = detect_profile(plugin.base_url, plugin.model)
        self.ollama = bool(plugin.base_url and _OLLAMA.search(plugin.base_url))
        # Recorded in the table's metadata: the provider family, as MEMORY_MCP_EMBEDDING_PROVIDER names it.
        self.name = "jina" if self.profile.name == "jina" else "openai"

    def _ensure_client(self) -> httpx.AsyncClient:
        client = super()._ensure_client()
        if self.profile.name == "azure-openai" and self._api_key:
            client.headers["api-key"] = self._api_key  # the plugin's Azure header, beside the bearer token
        return client

    def _payload(self, texts: list[str], kind: str) -> dict[str, Any]:
        plugin, profile = self.plugin, self.profile
        task = plugin.task_query if kind == QUERY else plugin.task_passage
        if kind == QUERY and _QWEN3.search(plugin.model):
            instruction = plugin.task_query if plugin.task_query and plugin.task_query.strip() else _QWEN3_QUERY_TASK
            texts = [f"Instruct: {instruction}\nQuery:{text}" if text.strip() else text for text in texts]
        payload: dict[str, Any] = {"model": plugin.model, "input": [text.strip() for text in texts]}
        if self.ollama:
            return payload  # the plugin's native Ollama call sends the model and the input only
        if profile.encoding_format:
            payload["encoding_format"] = "float"
        if profile.normalized and plugin.normalized is not None:
            payload["normalized"] = plugin.normalized
        if profile.task_field and task:
            payload[profile.task_field] = profile.task_values.get(task, task)
        if not plugin.omit_dimensions and profile.dimensions_field and plugin.request_dimensions:
            payload[profile.dimensions_field] = plugin.request_dimensions
        return payload


def plugin_endpoint(base_url: str | None, ollama: bool) -> str:
    """Where the plugin posts: the OpenAI SDK appends ``/embeddings`` to the base URL as given."""
    if ollama and base_url:
        return re.sub(r"/v1$", "", base_url.rstrip("/")) + "/v1/embeddings"
    base = base_url or os.environ.get("OPENAI_BASE_URL") or OPENAI_BASE_URL
    return base.rstrip("/") + "/embeddings"


def mirrored_plugin(settings: Settings) -> PluginEmbedding | None:
    """The plugin's settings when openclaw.json sets it up on the table ``settings`` opens, with our overrides.

    Raises:
        OpenClawConfigError: it does, but its settings cannot be resolved.
    """
    if "embedding_provider" in settings.model_fields_set:
        return None
    plugin = plugin_on_table(settings)
    return None if plugin is None else _with_overrides(plugin, settings)


def plugin_on_table(settings: Settings) -> PluginEmbedding | None:
    """The plugin's own settings (ours left aside) when openclaw.json points it at the directory ``settings``
    opens: what it would open the table with.

    Raises:
        OpenClawConfigError: it does, but its settings cannot be resolved.
    """
    if settings.openclaw_config is None or settings.db_dir is None:
        return None
    plugin = load_plugin_embedding(settings.openclaw_config)
    if plugin is None or _same_dir(plugin.db_path) != _same_dir(settings.db_dir):
        return None
    return plugin


def plugin_identity(settings: Settings) -> dict[str, str] | None:
    """The model identity ``serve`` would embed with on this directory from openclaw.json, if it would:
    the model of a plugin table's vectors, which the table itself does not record."""
    try:
        plugin = mirrored_plugin(settings)
    except OpenClawConfigError:
        return None
    return None if plugin is None else build(plugin, settings).identity


def _same_dir(path: Path) -> str:
    return os.path.realpath(path.expanduser())


def _with_overrides(plugin: PluginEmbedding, settings: Settings) -> PluginEmbedding:
    given = settings.model_fields_set
    changes: dict[str, Any] = {}
    if "embedding_model" in given and settings.embedding_model:
        changes["model"] = settings.embedding_model
    if "embedding_base_url" in given and settings.embedding_base_url:
        changes["base_url"] = settings.embedding_base_url
    if "embedding_api_key" in given and settings.embedding_api_key is not None:
        changes["api_key"] = settings.embedding_api_key.get_secret_value()
        changes["key_source"] = "MEMORY_MCP_EMBEDDING_API_KEY"
    if "embedding_dimensions" in given and settings.embedding_dimensions:
        changes["dimensions"] = changes["request_dimensions"] = settings.embedding_dimensions
    names = [f"MEMORY_MCP_EMBEDDING_{key.upper()}" for key in ("model", "base_url", "dimensions") if key in changes]
    names += ["MEMORY_MCP_EMBEDDING_API_KEY"] if "api_key" in changes else []
    return dataclasses.replace(plugin, **changes, overridden=tuple(names)) if changes else plugin


def build(plugin: PluginEmbedding, settings: Settings) -> OpenClawEmbedder:
    ollama = bool(plugin.base_url and _OLLAMA.search(plugin.base_url))
    return OpenClawEmbedder(
        plugin=plugin,
        model=plugin.model,
        endpoint=plugin_endpoint(plugin.base_url, ollama),
        api_key=SecretStr(plugin.api_key) if plugin.api_key else None,
        dimension=plugin.dimensions,
        timeout_s=settings.embedding_timeout_s,
        max_retries=settings.embedding_max_retries,
        batch_size=settings.embedding_batch_size,
        deadline_s=settings.embedding_deadline_s,
        breaker=breaker_for(settings),
    )


def embedder_from_openclaw(settings: Settings) -> Embedder | None:
    """The plugin's embedder when openclaw.json sets it up on our table (start-up logs where from), else None.

    Raises:
        OpenClawConfigError: it does, but its settings cannot be resolved.
    """
    plugin = mirrored_plugin(settings)
    if plugin is None:
        return None
    logger.info("%s", plugin.describe())
    return build(plugin, settings)


def describe_embedding_settings(settings: Settings) -> str:
    """One line for ``doctor``: where the embedding settings come from (never the key)."""
    try:
        plugin = mirrored_plugin(settings)
    except OpenClawConfigError as exc:
        return f"embedding settings: {exc.message}"
    if plugin is not None:
        return plugin.describe()
    if "embedding_provider" in settings.model_fields_set:
        return f"embedding settings from MEMORY_MCP_EMBEDDING_*: provider {settings.embedding_provider}"
    where = settings.openclaw_config or "MEMORY_MCP_OPENCLAW_CONFIG (unset)"
    return (f"embedding settings from MEMORY_MCP_EMBEDDING_* and defaults: provider {settings.embedding_provider} "
            f"({where} sets up no memory-lancedb-pro on this table)")
