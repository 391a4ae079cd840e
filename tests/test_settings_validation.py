"""Every setting that can be wrong ends ``serve`` with one line naming its variable and the rule, status 2,
before the port opens. One row per setting; a setting added to app/settings.py without a row fails here."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from app.cli import main, serve
from app.settings import Settings
from tests.support.server import free_port

BIG = str(10**23)
Value = str | Callable[[Path], str]


def _file(path: Path) -> str:
    path.write_text("not a database, not a directory\n", encoding="utf-8")
    return str(path)


def _under_a_file(path: Path) -> str:
    return str(Path(_file(path)) / "inside")


def _directory(path: Path) -> str:
    path.mkdir()
    return str(path)


def _closed_port_board(_: Path) -> str:
    return f"postgresql://postgres@127.0.0.1:{free_port()}/board"


#: (variable, a wrong value, what the line says): every Settings field appears at least once.
ROWS: list[tuple[str, Value, str]] = [
    ("MEMORY_MCP_HOST", "my host", "must be an IP address or a host name"),
    ("MEMORY_MCP_PORT", "70000", "less than or equal to 65535"),
    ("MEMORY_MCP_PORT", "http", "valid integer"),
    ("MEMORY_MCP_TOKEN", "a token with a space in it", "must not contain spaces"),
    ("MEMORY_MCP_TOKEN", "short", "at least 16 characters"),
    ("MEMORY_MCP_ALLOW_REMOTE", "maybe", "valid boolean"),
    ("MEMORY_MCP_ALLOWED_HOSTS", '{"example.com": 1}', "JSON list of non-empty strings"),
    ("MEMORY_MCP_ALLOWED_HOSTS", "http://example.com/", "is not a host name"),
    ("MEMORY_MCP_ALLOWED_ORIGINS", '{"http://example.com": 1}', "JSON list of non-empty strings"),
    ("MEMORY_MCP_CORS_ORIGINS", '{"http://example.com": 1}', "JSON list of non-empty strings"),
    ("MEMORY_MCP_CORS_ORIGINS", "*", "is not an origin"),
    ("MEMORY_MCP_AGENT_TOKENS", '["agent-token-0123456789"]', "must be a JSON object"),
    ("MEMORY_MCP_AGENT_TOKENS", '{"agent token 0123456789": "bob"}', "must not contain spaces"),
    ("MEMORY_MCP_AGENT_MAY_WRITE_GLOBAL", "sometimes", "valid boolean"),
    ("MEMORY_MCP_MAX_BODY_BYTES", BIG, "less than or equal to"),
    ("MEMORY_MCP_LOG_FORMAT", "xml", "MEMORY_MCP_LOG_FORMAT"),
    ("MEMORY_MCP_LOG_LEVEL", "BOGUS", "must be one of CRITICAL, ERROR, WARNING, INFO, DEBUG"),
    ("MEMORY_MCP_SSE_ENDPOINT_FORMAT", "xml", "must be auto, path or json"),
    ("MEMORY_MCP_STATELESS_HTTP", "perhaps", "valid boolean"),
    ("MEMORY_MCP_MAX_SESSIONS", "0", "greater than or equal to 1"),
    ("MEMORY_MCP_MAX_SESSIONS_TOTAL", BIG, "less than or equal to"),
    ("MEMORY_MCP_DB_PATH", "ftp://bucket/memories", "must be a directory or a bucket/prefix URI"),
    ("MEMORY_MCP_DB_PATH", _under_a_file, "cannot create the directory"),
    ("MEMORY_MCP_STORAGE_OPTIONS", '{"aws_endpoint": ', "not valid JSON"),
    ("MEMORY_MCP_TABLE", "no/slash", "should match pattern"),
    ("MEMORY_MCP_DEDUP_THRESHOLD", "1.5", "less than or equal to 1"),
    ("MEMORY_MCP_MAX_TEXT_CHARS", BIG, "less than or equal to"),
    ("MEMORY_MCP_MAX_TAGS", "-1", "greater than or equal to 0"),
    ("MEMORY_MCP_MAX_TAG_CHARS", "0", "greater than or equal to 1"),
    ("MEMORY_MCP_WRITE_QUEUE_MAX", BIG, "less than or equal to"),
    ("MEMORY_MCP_WRITE_BATCH_MAX", "0", "greater than or equal to 1"),
    ("MEMORY_MCP_COMPACT_EVERY_COMMITS", "0", "greater than or equal to 1"),
    ("MEMORY_MCP_LOCK_TIMEOUT_S", "0", "greater than 0"),
    ("MEMORY_MCP_COMMIT_DEADLINE_S", "inf", "less than or equal to"),
    ("MEMORY_MCP_VECTOR_CACHE", "kinda", "valid boolean"),
    ("MEMORY_MCP_RANK_LEXICAL_WEIGHT", "11", "less than or equal to 10"),
    ("MEMORY_MCP_RANK_KEYWORD_POOL_MAX_ROWS", BIG, "less than or equal to"),
    ("MEMORY_MCP_EMBEDDING_PROVIDER", "nope", "MEMORY_MCP_EMBEDDING_PROVIDER"),
    ("MEMORY_MCP_EMBEDDING_BASE_URL", "ftp://models.example/v1", "must be an http:// or https:// URL"),
    ("MEMORY_MCP_EMBEDDING_API_KEY", "sk key with a space", "must not contain spaces"),
    ("MEMORY_MCP_EMBEDDING_DIMENSIONS", "0", "greater than or equal to 1"),
    ("MEMORY_MCP_EMBEDDING_TIMEOUT_S", "0", "greater than 0"),
    ("MEMORY_MCP_EMBEDDING_DEADLINE_S", BIG, "less than or equal to"),
    ("MEMORY_MCP_EMBEDDING_MAX_RETRIES", "1000", "less than or equal to 100"),
    ("MEMORY_MCP_EMBEDDING_BREAKER_FAILURES", "0", "greater than or equal to 1"),
    ("MEMORY_MCP_EMBEDDING_BREAKER_COOLDOWN_S", "0", "greater than 0"),
    ("MEMORY_MCP_RECALL_EMBEDDING_BUDGET_S", "nan", "MEMORY_MCP_RECALL_EMBEDDING_BUDGET_S"),
    ("MEMORY_MCP_EMBEDDING_BATCH_SIZE", "0", "greater than or equal to 1"),
    ("MEMORY_MCP_LOCAL_MODEL_PROCESS", "y3s", "valid boolean"),
    ("MEMORY_MCP_LOCAL_MODEL_INT8", "maybe", "valid boolean"),
    ("MEMORY_MCP_MODEL_CACHE_DIR", _under_a_file, "cannot create the directory"),
    ("JINA_API_KEY", "jina key\nwith a break", "must not contain spaces"),
    ("MEMORY_MCP_OPENCLAW_CONFIG", _directory, "is not a file"),
    ("MEMORY_MCP_KANBAN_DB", "mysql://board.example/board", "must be a SQLite file path or a postgresql:// URL"),
    ("MEMORY_MCP_KANBAN_DB", _file, "is not a usable SQLite database"),
    ("MEMORY_MCP_KANBAN_DB", _directory, "is not a file"),
    ("MEMORY_MCP_KANBAN_DB", _closed_port_board, "does not answer"),
    ("MEMORY_MCP_JOB_COMMAND", '{"argv": ["/bin/true"]}', "one program path, or a JSON list of strings"),
    ("MEMORY_MCP_JOB_COMMAND", "/no/such/program", "cannot be read"),
    ("MEMORY_MCP_JOB_TIMEOUT_S", "0", "greater than 0"),
    ("MEMORY_MCP_JOB_KILL_GRACE_S", "-1", "greater than or equal to 0"),
    ("MEMORY_MCP_JOB_MAX_CONCURRENT", "0", "greater than or equal to 1"),
    ("MEMORY_MCP_JOB_OUTPUT_CAP_BYTES", "10", "greater than or equal to 1024"),
    ("MEMORY_MCP_JOB_WORKDIR", lambda tmp: str(tmp / "missing"), "is not an existing directory"),
    ("MEMORY_MCP_JOBS_ALLOW_ROOT", "perhaps", "valid boolean"),
]
#: Settings with no wrong value: any text is a name the provider itself judges.
FREE_FORM = {"embedding_model": "any model name; the provider answers for it"}


def _variable(field: str) -> str:
    return "JINA_API_KEY" if field == "jina_api_key" else f"MEMORY_MCP_{field.upper()}"


def test_every_setting_has_a_row() -> None:
    covered = {variable for variable, _, _ in ROWS}
    missing = [field for field in Settings.model_fields if field not in FREE_FORM and _variable(field) not in covered]
    assert missing == []


def _base_env(tmp_path: Path) -> dict[str, str]:
    """A setting that passes everywhere, on temp dirs: the one wrong value of a row is the only problem."""
    return {"MEMORY_MCP_DB_PATH": str(tmp_path / "lancedb"), "MEMORY_MCP_KANBAN_DB": str(tmp_path / "k.sqlite3"),
            "MEMORY_MCP_MODEL_CACHE_DIR": str(tmp_path / "models"), "MEMORY_MCP_EMBEDDING_PROVIDER": "hash",
            "MEMORY_MCP_OPENCLAW_CONFIG": "", "MEMORY_MCP_PORT": "0"}


@pytest.mark.parametrize(("variable", "value", "rule"), ROWS, ids=[f"{row[0]}={i}" for i, row in enumerate(ROWS)])
def test_a_wrong_setting_ends_serve_with_one_line_naming_it_before_the_port_opens(
    make_settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path,
    variable: str, value: Value, rule: str,
) -> None:
    env = _base_env(tmp_path)
    if variable == "MEMORY_MCP_MODEL_CACHE_DIR":
        env["MEMORY_MCP_EMBEDDING_PROVIDER"] = "local"  # the cache is checked where a provider writes to it
    env[variable] = value if isinstance(value, str) else value(tmp_path / "given")
    for name, text in env.items():
        monkeypatch.setenv(name, text)

    def bound(host: str, port: int) -> None:
        raise AssertionError(f"serve bound {host}:{port} despite {variable}")

    monkeypatch.setattr(serve, "bind_listener", bound)
    status = main(["serve"])
    lines = capsys.readouterr().err.splitlines()
    assert status == 2
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"memory-mcp: {variable}") and rule in lines[0], lines[0]


@pytest.mark.parametrize(("variable", "value"), [
    ("MEMORY_MCP_LOG_LEVEL", "BOGUS"),
    ("MEMORY_MCP_ALLOWED_HOSTS", '{"example.com": 1}'),
    ("MEMORY_MCP_MAX_BODY_BYTES", BIG),
    ("MEMORY_MCP_KANBAN_DB", "TMP"),
])
def test_the_real_command_exits_2_with_one_line_and_no_traceback(make_settings, tmp_path: Path, variable: str,
                                                                  value: str) -> None:
    env = {**os.environ, **_base_env(tmp_path), variable: value.replace("TMP", str(tmp_path))}
    done = subprocess.run([sys.executable, "-m", "app.cli", "serve"], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 2
    assert done.stdout == "" and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith(f"memory-mcp: {variable}: ") and "Traceback" not in done.stderr
