import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.settings import Settings


def test_defaults_match_the_documented_contract(make_settings) -> None:
    settings = Settings()
    assert settings.host == "127.0.0.1"
    assert settings.port == 3002
    assert settings.table == "memories"
    assert settings.embedding_provider == "local"
    assert settings.db_path == Path("~/.openclaw/memory/lancedb-pro").expanduser()
    assert "~" not in str(settings.db_path)


def test_env_names_are_the_public_contract(make_settings, monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("MEMORY_MCP_PORT", "4010")
    monkeypatch.setenv("MEMORY_MCP_DB_PATH", str(tmp_path / "db"))
    monkeypatch.setenv("MEMORY_MCP_TABLE", "other")
    monkeypatch.setenv("MEMORY_MCP_EMBEDDING_PROVIDER", "hash")
    monkeypatch.setenv("MEMORY_MCP_KANBAN_DB", str(tmp_path / "k.sqlite3"))
    monkeypatch.setenv("MEMORY_MCP_TOKEN", "s3cret-token")
    monkeypatch.setenv("MEMORY_MCP_JOB_COMMAND", '["/bin/echo", "hi there"]')
    settings = Settings()
    assert (settings.port, settings.table, settings.embedding_provider) == (4010, "other", "hash")
    assert settings.db_path == tmp_path / "db"
    assert settings.kanban_db_path == tmp_path / "k.sqlite3"
    assert settings.token is not None and settings.token.get_secret_value() == "s3cret-token"
    assert settings.job_command == ["/bin/echo", "hi there"]


def test_job_command_path_is_one_argv_element_never_split(make_settings, monkeypatch) -> None:
    monkeypatch.setenv("MEMORY_MCP_JOB_COMMAND", "/opt/jobs/run job.sh")
    assert Settings().job_command == ["/opt/jobs/run job.sh"]


def test_kanban_db_defaults_next_to_the_memory_dir(make_settings, tmp_path) -> None:
    settings = Settings(db_path=tmp_path / "mem" / "lancedb-pro")
    assert settings.kanban_db_path == tmp_path / "mem" / "memory-mcp-kanban.sqlite3"


def test_non_loopback_bind_without_token_is_refused(make_settings) -> None:
    with pytest.raises(ValidationError, match="MEMORY_MCP_TOKEN"):
        Settings(host="0.0.0.0")


def test_non_loopback_bind_with_token_or_explicit_opt_out_is_allowed(make_settings) -> None:
    assert Settings(host="0.0.0.0", token="a-long-token").host == "0.0.0.0"
    assert Settings(host="0.0.0.0", allow_remote=True).allow_remote


def test_unknown_provider_is_rejected(make_settings) -> None:
    with pytest.raises(ValidationError):
        Settings(embedding_provider="nope")


def test_a_blank_or_tiny_token_is_refused_rather_than_silently_locking_everyone_out(make_settings) -> None:
    with pytest.raises(ValidationError, match="at least 8"):
        Settings(token="  ")


def test_agent_tokens_alone_count_as_auth_for_a_remote_bind(make_settings) -> None:
    assert Settings(host="0.0.0.0", agent_tokens={"agent-token-123": "codex"}).host == "0.0.0.0"


def test_a_rejected_setting_never_echoes_its_value(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "tok-" + "s3cr3t" * 4
    monkeypatch.setenv("MEMORY_MCP_AGENT_TOKENS", json.dumps({secret: {"agent": "ci", "allow": ["root:all"]}}))
    with pytest.raises(ValidationError) as refused:
        Settings()
    assert "agent_tokens" in str(refused.value) and secret not in str(refused.value)
