"""OpenClaw's openclaw.json: memory-mcp finds memory-lancedb-pro's embedding settings and resolves its key."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from app.errors import InvalidInput
from app.memory.embeddings import create_embedder
from app.memory.embeddings.openclaw import OpenClawEmbedder, describe_embedding_settings, mirrored_plugin
from app.memory.embeddings.openclaw_config import OpenClawConfigError, load_plugin_embedding, resolve_api_key
from app.settings import Settings
from tests.conftest import SettingsFactory
from tests.memory.embeddings.fake_server import FakeEmbeddingServer
from tests.memory.embeddings.remote_support import API_KEY

WriteConfig = Callable[..., Path]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "lancedb"


@pytest.fixture
def write_config(tmp_path: Path, db: Path) -> WriteConfig:
    """Write an openclaw.json (JSON5: comments, unquoted keys, trailing commas) with the plugin's embedding."""

    def write(embedding: dict[str, Any], *, db_path: Path | None = None, entry: dict[str, Any] | None = None) -> Path:
        config = {"dbPath": str(db_path or db), "embedding": embedding}
        body = json.dumps({"plugins": {"entries": {"memory-lancedb-pro": {"enabled": True, "config": config,
                                                                          **(entry or {})}}}}, indent=2)
        path = tmp_path / "openclaw.json"
        path.write_text("// OpenClaw config\n{\n  gateway: {port: 18789,},\n" + body[1:-1] + ",\n}\n", encoding="utf-8")
        return path

    return write


@pytest.fixture
def plain_settings(make_settings: SettingsFactory, tmp_path: Path, db: Path) -> Callable[..., Settings]:
    """Settings without MEMORY_MCP_EMBEDDING_PROVIDER (make_settings sets it), env cleared by make_settings."""
    make_settings()

    def factory(**values: Any) -> Settings:
        base: dict[str, Any] = {"db_path": db, "kanban_db": tmp_path / "kanban.sqlite3", "model_cache_dir": None,
                                "openclaw_config": tmp_path / "openclaw.json"}
        return Settings(**{**base, **values})

    return factory


@pytest.fixture
async def built(plain_settings: Callable[..., Settings]) -> AsyncIterator[Callable[..., OpenClawEmbedder]]:
    made: list[OpenClawEmbedder] = []

    def build(**values: Any) -> OpenClawEmbedder:
        embedder = create_embedder(plain_settings(**values))
        assert isinstance(embedder, OpenClawEmbedder)
        made.append(embedder)
        return embedder

    yield build
    for embedder in made:
        await embedder.close()


def jina(fake: FakeEmbeddingServer, **more: Any) -> dict[str, Any]:
    return {"provider": "openai-compatible", "apiKey": API_KEY, "model": "jina-embeddings-v5-text-small",
            "baseURL": fake.url, "dimensions": 8, "requestDimensions": 8, "taskQuery": "retrieval.query",
            "taskPassage": "retrieval.passage", "normalized": True, **more}


async def test_the_plugins_jina_settings_give_its_exact_request_for_passages_and_queries(
    write_config: WriteConfig, fake: FakeEmbeddingServer, built: Callable[..., OpenClawEmbedder]
) -> None:
    write_config(jina(fake))
    embedder = built()
    await embedder.embed_documents(["  a stored memory  "])
    await embedder.embed_query("what was stored")

    passage, query = (request.body for request in fake.state.requests)
    assert passage == {"model": "jina-embeddings-v5-text-small", "input": ["a stored memory"],
                       "encoding_format": "float", "normalized": True, "task": "retrieval.passage", "dimensions": 8}
    assert query["task"] == "retrieval.query" and query["input"] == ["what was stored"]
    assert fake.state.requests[0].path == "/v1/embeddings"
    assert fake.state.requests[0].headers["authorization"] == f"Bearer {API_KEY}"
    assert embedder.identity == {"provider": "jina", "model": "jina-embeddings-v5-text-small", "dimension": "8"}


async def test_a_generic_endpoint_gets_no_task_and_dimensions_only_from_request_dimensions(
    write_config: WriteConfig, fake: FakeEmbeddingServer, built: Callable[..., OpenClawEmbedder]
) -> None:
    write_config({"apiKey": API_KEY, "model": "bge-m3", "baseURL": fake.url, "dimensions": 8,
                  "taskQuery": "retrieval.query", "normalized": True})
    embedder = built()
    await embedder.embed_documents(["text"])
    assert fake.state.requests[0].body == {"model": "bge-m3", "input": ["text"], "encoding_format": "float"}
    assert embedder.dimension == 8


async def test_voyage_models_get_input_type_and_output_dimension_without_encoding_format(
    write_config: WriteConfig, fake: FakeEmbeddingServer, built: Callable[..., OpenClawEmbedder]
) -> None:
    write_config({"apiKey": API_KEY, "model": "voyage-3", "baseURL": fake.url, "requestDimensions": 8,
                  "taskPassage": "retrieval.passage"})
    await built().embed_documents(["text"])
    assert fake.state.requests[0].body == {"model": "voyage-3", "input": ["text"], "input_type": "document",
                                           "output_dimension": 8}


async def test_qwen3_queries_carry_the_plugins_instruction(
    write_config: WriteConfig, fake: FakeEmbeddingServer, built: Callable[..., OpenClawEmbedder]
) -> None:
    write_config({"apiKey": API_KEY, "model": "Qwen3-Embedding-0.6B", "baseURL": fake.url, "dimensions": 8})
    await built().embed_query("deploy day")
    assert fake.state.requests[0].body["input"] == [
        "Instruct: Given a memory search query, retrieve relevant stored knowledge entries that match the query\n"
        "Query:deploy day"
    ]


def test_the_key_resolves_from_a_string_an_env_reference_and_env_or_file_secret_refs(tmp_path: Path) -> None:
    env = {"EMBED_KEY": "k-env", "OPENAI_API_KEY": "k-openai"}
    (tmp_path / "key.txt").write_text("k-file\n", encoding="utf-8")
    assert resolve_api_key("k-plain", env, tmp_path) == ("k-plain", "openclaw.json")
    assert resolve_api_key("${EMBED_KEY}", env, tmp_path) == ("k-env", "env EMBED_KEY")
    assert resolve_api_key({"source": "env", "provider": "default", "id": "EMBED_KEY"}, env, tmp_path)[0] == "k-env"
    assert resolve_api_key({"source": "file", "id": "key.txt"}, env, tmp_path) == ("k-file", "file key.txt (SecretRef)")
    assert resolve_api_key(["${EMBED_KEY}", "second"], env, tmp_path)[0] == "k-env"
    assert resolve_api_key(None, env, tmp_path)[0] == "k-openai"


@pytest.mark.parametrize(
    ("value", "problem"),
    [("${MISSING_KEY}", "MISSING_KEY is not set"), ({"source": "env", "id": "MISSING_KEY"}, "MISSING_KEY is not set"),
     ({"source": "file", "id": "absent.txt"}, "cannot read"), ({"source": "vault", "id": "x"}, "must be a string"),
     (None, "apiKey is required"), ("", "apiKey is empty")],
)
def test_a_key_that_cannot_be_resolved_is_a_clear_error(tmp_path: Path, value: object, problem: str) -> None:
    with pytest.raises(OpenClawConfigError, match=problem):
        resolve_api_key(value, {}, tmp_path)


def test_settings_come_from_openclaw_only_for_the_table_memory_mcp_opens(
    write_config: WriteConfig, fake: FakeEmbeddingServer, plain_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    write_config(jina(fake), db_path=tmp_path / "elsewhere")
    assert mirrored_plugin(plain_settings()) is None
    assert "sets up no memory-lancedb-pro on this table" in describe_embedding_settings(plain_settings())

    write_config(jina(fake), entry={"enabled": False})
    assert mirrored_plugin(plain_settings()) is None

    write_config(jina(fake))
    assert mirrored_plugin(plain_settings(embedding_provider="hash")) is None  # ours win
    assert mirrored_plugin(plain_settings(openclaw_config=None)) is None
    assert mirrored_plugin(plain_settings()) is not None


def test_memory_mcp_embedding_settings_win_field_by_field(
    write_config: WriteConfig, fake: FakeEmbeddingServer, plain_settings: Callable[..., Settings]
) -> None:
    write_config(jina(fake))
    plugin = mirrored_plugin(plain_settings(embedding_model="jina-embeddings-v3", embedding_dimensions=16))
    assert plugin is not None
    assert (plugin.model, plugin.dimensions, plugin.request_dimensions) == ("jina-embeddings-v3", 16, 16)
    assert plugin.task_passage == "retrieval.passage"
    assert "overridden by MEMORY_MCP_EMBEDDING_MODEL, MEMORY_MCP_EMBEDDING_DIMENSIONS" in plugin.describe()


async def test_start_up_and_doctor_say_where_the_settings_came_from_but_never_the_key(
    write_config: WriteConfig, fake: FakeEmbeddingServer, plain_settings: Callable[..., Settings],
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("EMBED_KEY", API_KEY)
    path = write_config(jina(fake, apiKey="${EMBED_KEY}"))
    line = describe_embedding_settings(plain_settings())
    assert line.startswith(f"embedding settings from {path} (plugins.entries.memory-lancedb-pro.config.embedding)")
    assert "jina-embeddings-v5-text-small" in line and "API key from env EMBED_KEY" in line
    assert API_KEY not in line

    with caplog.at_level(logging.INFO, logger="app.memory.embeddings.openclaw"):
        embedder = create_embedder(plain_settings())
    await embedder.close()
    assert line in caplog.messages and API_KEY not in caplog.text

    monkeypatch.delenv("EMBED_KEY")
    assert "environment variable EMBED_KEY is not set" in describe_embedding_settings(plain_settings())
    with pytest.raises(InvalidInput, match="EMBED_KEY is not set"):
        create_embedder(plain_settings())


def test_the_plugins_defaults_apply_model_size_and_db_path(tmp_path: Path) -> None:
    path = tmp_path / "openclaw.json"
    path.write_text('{plugins: {entries: {"memory-lancedb-pro": {config: {embedding: {apiKey: "k"}}}}}}',
                    encoding="utf-8")
    plugin = load_plugin_embedding(path, env={})
    assert plugin is not None
    assert (plugin.model, plugin.dimensions, plugin.base_url) == ("text-embedding-3-small", 1536, None)
    assert plugin.db_path == Path("~/.openclaw/memory/lancedb-pro").expanduser()


def test_a_file_that_is_not_json5_is_a_clear_error_and_no_file_is_no_settings(tmp_path: Path) -> None:
    assert load_plugin_embedding(tmp_path / "absent.json") is None
    (tmp_path / "bad.json").write_text("{plugins: [", encoding="utf-8")
    with pytest.raises(OpenClawConfigError, match="not valid JSON5"):
        load_plugin_embedding(tmp_path / "bad.json")


def test_an_unknown_model_without_dimensions_is_refused_as_the_plugin_refuses_it(tmp_path: Path) -> None:
    path = tmp_path / "openclaw.json"
    path.write_text('{plugins: {entries: {"memory-lancedb-pro": {config: {embedding: {apiKey: "k", model: "m"}}}}}}',
                    encoding="utf-8")
    with pytest.raises(OpenClawConfigError, match="set embedding.dimensions"):
        load_plugin_embedding(path, env={})


def test_a_blank_openclaw_config_setting_turns_the_reading_off(
    make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_settings()
    monkeypatch.setenv("MEMORY_MCP_OPENCLAW_CONFIG", "")
    assert Settings().openclaw_config is None
    monkeypatch.setenv("MEMORY_MCP_OPENCLAW_CONFIG", "~/oc.json")
    assert Settings().openclaw_config == Path("~/oc.json").expanduser()


def test_the_config_nested_once_more_is_read_as_the_plugin_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "openclaw.json"
    path.write_text('{plugins: {entries: {"memory-lancedb-pro": {config: {config: {embedding: {apiKey: "k", '
                    'model: "bge-m3"}}}}}}}', encoding="utf-8")
    plugin = load_plugin_embedding(path, env={})
    assert plugin is not None and (plugin.model, plugin.dimensions) == ("bge-m3", 1024)
    path.write_text('{plugins: {entries: {"memory-lancedb-pro": {config: {dbPath: "/x"}}}}}', encoding="utf-8")
    assert load_plugin_embedding(path, env={}) is None
