import json
import logging
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.logging_setup import formatter_for
from app.settings import Settings, describe_errors


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
    monkeypatch.setenv("MEMORY_MCP_TOKEN", "s3cret-token-0123456")
    monkeypatch.setenv("MEMORY_MCP_JOB_COMMAND", '["/bin/echo", "hi there"]')
    settings = Settings()
    assert (settings.port, settings.table, settings.embedding_provider) == (4010, "other", "hash")
    assert settings.db_path == tmp_path / "db"
    assert settings.kanban_db_path == tmp_path / "k.sqlite3"
    assert settings.token is not None and settings.token.get_secret_value() == "s3cret-token-0123456"
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
    assert Settings(host="0.0.0.0", token="a-long-token-0123456").host == "0.0.0.0"
    assert Settings(host="0.0.0.0", allow_remote=True).allow_remote


def test_unknown_provider_is_rejected(make_settings) -> None:
    with pytest.raises(ValidationError):
        Settings(embedding_provider="nope")


@pytest.mark.parametrize("token", ["  ", "x" * 15, "x" * 15 + "   "])
def test_a_blank_or_short_token_is_refused(make_settings, token: str) -> None:
    assert Settings(token="x" * 16).token is not None
    with pytest.raises(ValidationError, match="MEMORY_MCP_TOKEN must be at least 16"):
        Settings(token=token)


def test_a_short_agent_token_is_refused_naming_its_agent_not_the_token(make_settings) -> None:
    with pytest.raises(ValidationError) as refused:
        Settings(agent_tokens={"tok-SECRET-5": "bob"})
    assert describe_errors(refused.value) == [
        "MEMORY_MCP_AGENT_TOKENS: the token of agent 'bob' is shorter than 16 characters"]


def test_a_token_given_twice_is_refused(make_settings, monkeypatch: pytest.MonkeyPatch) -> None:
    token = "tok-SECRET-0123456789"
    monkeypatch.setenv("MEMORY_MCP_AGENT_TOKENS", f'{{"{token}": "bob", "{token}": "carol"}}')
    with pytest.raises(ValidationError) as refused:
        Settings()
    [line] = describe_errors(refused.value)
    assert line.startswith("MEMORY_MCP_AGENT_TOKENS: ") and "twice" in line and "SECRET" not in line


def test_an_agent_token_equal_to_the_main_token_is_refused(make_settings) -> None:
    token = "tok-SECRET-0123456789"
    with pytest.raises(ValidationError) as refused:
        Settings(token=token, agent_tokens={token: "bob"})
    [line] = describe_errors(refused.value)
    assert "agent 'bob'" in line and "MEMORY_MCP_TOKEN" in line and "SECRET" not in line


@pytest.mark.parametrize(("variable", "value", "problem"), [
    ("MEMORY_MCP_AGENT_TOKENS", '{"tok-SECRET-0123456789": "bob"', "not valid JSON"),
    ("MEMORY_MCP_AGENT_TOKENS", '["tok-SECRET-0123456789"]', "must be a JSON object"),
    ("MEMORY_MCP_STORAGE_OPTIONS", '{"aws_secret_access_key": SECRET}', "not valid JSON"),
    ("MEMORY_MCP_PORT", "SECRET", "valid integer"),
])
def test_a_bad_value_is_one_line_naming_the_variable_and_the_problem_never_the_value(
    make_settings, monkeypatch: pytest.MonkeyPatch, variable: str, value: str, problem: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValidationError) as refused:
        Settings()
    [line] = describe_errors(refused.value)
    assert line.startswith(f"{variable}: ") and problem in line and "SECRET" not in line


def test_agent_tokens_alone_count_as_auth_for_a_remote_bind(make_settings) -> None:
    assert Settings(host="0.0.0.0", agent_tokens={"agent-token-0123456": "codex"}).host == "0.0.0.0"


def test_a_rejected_setting_never_echoes_its_value(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "tok-" + "s3cr3t" * 4
    monkeypatch.setenv("MEMORY_MCP_AGENT_TOKENS", json.dumps({secret: {"agent": "ci", "allow": ["root:all"]}}))
    with pytest.raises(ValidationError) as refused:
        Settings()
    assert "agent_tokens" in str(refused.value) and secret not in str(refused.value)


@pytest.mark.parametrize(("log_format", "terminal", "first"), [
    ("auto", True, "12:"), ("auto", False, "{"), ("json", True, "{"), ("text", True, "level="),
    ("console", False, "12:"),
])
def test_logs_are_readable_on_a_terminal_and_json_otherwise_unless_asked(
    make_settings, log_format: str, terminal: bool, first: str
) -> None:
    record = logging.LogRecord("app.main", logging.INFO, __file__, 1, "memory-mcp listening", None, None)
    record.created = time.mktime((2026, 1, 1, 12, 0, 0, 0, 0, -1))
    line = formatter_for(log_format, terminal).format(record)
    assert line.startswith(first) and "memory-mcp listening" in line
    assert make_settings().log_format == "text" and Settings().log_format == "auto"
