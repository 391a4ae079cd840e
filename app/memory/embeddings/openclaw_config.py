"""memory-lancedb-pro's embedding settings, read from OpenClaw's ``openclaw.json`` as the plugin reads them.

The plugin (OpenClaw's memory plugin) records no model in the table, so memory-mcp can only match its
vectors by embedding with the same settings. This module mirrors the plugin's config parsing
(``parsePluginConfig`` in its ``index.ts``) and its API key resolution: a string with ``${ENV}``
references, or a SecretRef ``{"source": "env"|"file", "id": ...}``; without a key, ``OPENAI_API_KEY``.
Nothing here logs or returns the key in a message.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import json5

from app.errors import InvalidInput

PLUGIN_ID = "memory-lancedb-pro"
DEFAULT_OPENCLAW_CONFIG = Path("~/.openclaw/openclaw.json")
DEFAULT_PLUGIN_DB = Path("~/.openclaw/memory/lancedb-pro")  # the plugin's getDefaultDbPath()
DEFAULT_MODEL = "text-embedding-3-small"
_ENV_REF = re.compile(r"\$\{([^}]+)\}")

#: The plugin's EMBEDDING_DIMENSIONS: a model's vector size when the config sets none.
KNOWN_DIMENSIONS = {
    "text-embedding-3-small": 1536, "text-embedding-3-large": 3072, "text-embedding-004": 768,
    "gemini-embedding-001": 3072, "nomic-embed-text": 768, "mxbai-embed-large": 1024, "bge-m3": 1024,
    "BAAI/bge-m3": 1024, "all-MiniLM-L6-v2": 384, "all-mpnet-base-v2": 512,
    "jina-embeddings-v5-text-small": 1024, "jina-embeddings-v5-text-nano": 768,
    "voyage-4": 1024, "voyage-4-lite": 1024, "voyage-4-large": 1024,
    "voyage-3": 1024, "voyage-3-lite": 512, "voyage-3-large": 1024,
}


class OpenClawConfigError(InvalidInput):
    """openclaw.json sets up memory-lancedb-pro in a way memory-mcp cannot follow."""

    code = "openclaw_config_invalid"


@dataclass(frozen=True)
class PluginEmbedding:
    """How memory-lancedb-pro embeds, resolved; ``describe()`` is safe to print (no key)."""

    config_path: Path
    db_path: Path
    model: str
    base_url: str | None
    api_key: str = field(repr=False)
    key_source: str
    dimensions: int
    request_dimensions: int | None = None
    omit_dimensions: bool = False
    task_query: str | None = None
    task_passage: str | None = None
    normalized: bool | None = None
    overridden: tuple[str, ...] = ()

    def describe(self) -> str:
        parts = [f"model {self.model}", f"at {self.base_url or 'the OpenAI API'}", f"{self.dimensions}-d"]
        if self.request_dimensions and not self.omit_dimensions:
            parts.append(f"requests {self.request_dimensions}")
        if self.task_query or self.task_passage:
            parts.append(f"tasks {self.task_query or '-'}/{self.task_passage or '-'}")
        if self.normalized is not None:
            parts.append(f"normalized={str(self.normalized).lower()}")
        parts.append(f"API key from {self.key_source}")
        where = f"{self.config_path} (plugins.entries.{PLUGIN_ID}.config.embedding)"
        text = f"embedding settings from {where}: {', '.join(parts)}"
        return text + (f"; overridden by {', '.join(self.overridden)}" if self.overridden else "")


def load_plugin_embedding(config_path: Path, env: Mapping[str, str] | None = None) -> PluginEmbedding | None:
    """The plugin's embedding settings, or None when the file is absent or does not enable the plugin.

    Raises:
        OpenClawConfigError: the file is not JSON5, or the plugin's settings cannot be resolved.
    """
    env = os.environ if env is None else env
    path = config_path.expanduser()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise OpenClawConfigError(f"{path}: cannot be read ({exc.strerror})") from None
    try:
        document = json5.loads(text)
    except ValueError as exc:
        raise OpenClawConfigError(f"{path}: not valid JSON5 ({exc})") from None
    config = _plugin_config(document)
    if config is None:
        return None
    try:
        return _resolve(path, config, env)
    except OpenClawConfigError as exc:
        raise OpenClawConfigError(f"{path}: plugins.entries.{PLUGIN_ID}: {exc.message}") from None


def _plugin_config(document: object) -> dict[str, Any] | None:
    """``plugins.entries["memory-lancedb-pro"]``'s config, or None when absent or disabled."""
    plugins = document.get("plugins") if isinstance(document, dict) else None
    entries = plugins.get("entries") if isinstance(plugins, dict) else None
    entry = entries.get(PLUGIN_ID) if isinstance(entries, dict) else None
    if not isinstance(entry, dict) or entry.get("enabled") is False:
        return None
    config = entry.get("config")
    # The plugin also accepts its config nested once more, as config.config, when config has no embedding.
    if isinstance(config, dict) and "embedding" not in config and isinstance(config.get("config"), dict):
        config = config["config"]
    if not isinstance(config, dict) or not isinstance(config.get("embedding"), dict):
        return None
    return config


def _resolve(path: Path, config: dict[str, Any], env: Mapping[str, str]) -> PluginEmbedding:
    embedding: dict[str, Any] = config["embedding"]
    model = embedding["model"] if isinstance(embedding.get("model"), str) else DEFAULT_MODEL
    base_url = resolve_env_refs(embedding["baseURL"], env) if isinstance(embedding.get("baseURL"), str) else None
    api_key, key_source = resolve_api_key(embedding.get("apiKey"), env, path.parent)
    dimensions = _positive_int(embedding.get("dimensions", config.get("dimensions")), env)
    request_dimensions = _positive_int(embedding.get("requestDimensions"), env)
    size = request_dimensions or dimensions or KNOWN_DIMENSIONS.get(model)
    if size is None:
        raise OpenClawConfigError(f"embedding model {model!r} has no known size: set embedding.dimensions")
    db_value = config.get("dbPath")
    db_text = db_value.strip() if isinstance(db_value, str) and db_value.strip() else str(DEFAULT_PLUGIN_DB)
    return PluginEmbedding(
        config_path=path, db_path=_plugin_path(db_text.removeprefix("file://"), path.parent), model=model,
        base_url=base_url, api_key=api_key, key_source=key_source, dimensions=size,
        request_dimensions=request_dimensions, omit_dimensions=embedding.get("omitDimensions") is True,
        task_query=_text(embedding.get("taskQuery")), task_passage=_text(embedding.get("taskPassage")),
        normalized=embedding["normalized"] if isinstance(embedding.get("normalized"), bool) else None,
    )


def resolve_env_refs(value: str, env: Mapping[str, str]) -> str:
    """``${NAME}`` replaced by the variable, as the plugin's ``resolveEnvVars`` does.

    Raises:
        OpenClawConfigError: a referenced variable is unset or empty.
    """

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if not env.get(name):
            raise OpenClawConfigError(f"environment variable {name} is not set")
        return env[name]

    return _ENV_REF.sub(substitute, value)


def resolve_api_key(value: object, env: Mapping[str, str], base_dir: Path) -> tuple[str, str]:
    """The key the plugin sends (the first of a rotation list) and where it came from, for messages.

    Raises:
        OpenClawConfigError: no key, a SecretRef that cannot be resolved, or a value of the wrong type.
    """
    if isinstance(value, list):
        if not value:
            raise OpenClawConfigError("embedding.apiKey is an empty list")
        value = value[0]  # the plugin rotates keys for rate limits; any key gives the same vectors
    if value is None:
        if not env.get("OPENAI_API_KEY"):
            raise OpenClawConfigError("embedding.apiKey is required (set it, or OPENAI_API_KEY)")
        return env["OPENAI_API_KEY"], "env OPENAI_API_KEY (no embedding.apiKey)"
    if isinstance(value, str):
        if not value.strip():
            raise OpenClawConfigError("embedding.apiKey is empty")
        refs = _ENV_REF.findall(value)
        source = "env " + ", ".join(refs) if refs else "openclaw.json"
        return resolve_env_refs(value, env), source
    if isinstance(value, dict) and isinstance(value.get("id"), str) and value["id"].strip():
        source, ident = str(value.get("source", "")).strip(), value["id"].strip()
        if source == "env":
            if not env.get(ident):
                raise OpenClawConfigError(f"embedding.apiKey SecretRef: environment variable {ident} is not set")
            return env[ident], f"env {ident} (SecretRef)"
        if source == "file":
            return _key_file(_plugin_path(ident, base_dir)), f"file {ident} (SecretRef)"
    raise OpenClawConfigError("embedding.apiKey must be a string, a SecretRef {source: env|file, id} or a list")


def _key_file(path: Path) -> str:
    try:
        key = path.read_text(encoding="utf-8").rstrip()
    except OSError as exc:
        raise OpenClawConfigError(f"embedding.apiKey SecretRef: cannot read {path} ({exc.strerror})") from None
    if not key:
        raise OpenClawConfigError(f"embedding.apiKey SecretRef: file {path} is empty")
    return key


def _plugin_path(value: str, base_dir: Path) -> Path:
    """A path as OpenClaw's ``resolvePath`` gives it to the plugin: ``~`` expanded, relative to the config."""
    path = Path(value).expanduser()
    return path if path.is_absolute() else base_dir / path


def _positive_int(value: object, env: Mapping[str, str]) -> int | None:
    """The plugin's ``parsePositiveInt``: a number, or a numeric string that may hold ``${ENV}``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return int(value) if value > 0 and value == value and value != float("inf") else None
    if isinstance(value, str) and value.strip():
        try:
            number = float(resolve_env_refs(value.strip(), env))
        except ValueError:
            return None
        return int(number) if 0 < number < float("inf") else None
    return None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
