"""``memory-mcp config`` prints working client configs; ``.env.example`` documents every setting."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from pydantic import SecretStr

from app.cli import main
from app.settings import Settings
from tests.conftest import SettingsFactory
from tests.support.server import run_server

REPO = Path(__file__).resolve().parents[2]
TOKEN = "config-test-token"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MEMORY_MCP_URL", "MEMORY_MCP_TOKEN", "MEMORY_MCP_PORT"):
        monkeypatch.delenv(name, raising=False)


def config(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    assert main(["config", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_claude_default_is_streamable_http_at_mcp(capsys: pytest.CaptureFixture[str]) -> None:
    assert config(capsys, "claude") == {"mcpServers": {"memory-mcp": {"type": "http", "url": "http://localhost:3002/mcp"}}}


def test_claude_sse_points_at_the_legacy_sse_endpoint(capsys: pytest.CaptureFixture[str]) -> None:
    assert config(capsys, "claude", "--transport", "sse") == {
        "mcpServers": {"memory-mcp": {"type": "sse", "url": "http://localhost:3002/mcp/sse"}}
    }


def test_antigravity_uses_server_url(capsys: pytest.CaptureFixture[str]) -> None:
    assert config(capsys, "antigravity") == {"mcpServers": {"memory-mcp": {"serverUrl": "http://localhost:3002/mcp"}}}


def test_openclaw_gets_an_mcp_servers_entry_or_the_rest_urls(capsys: pytest.CaptureFixture[str]) -> None:
    assert config(capsys, "openclaw", "--transport", "sse") == {
        "mcp": {"servers": {"memory-mcp": {"url": "http://localhost:3002/mcp/sse", "transport": "sse"}}}
    }
    assert config(capsys, "openclaw")["mcp"]["servers"]["memory-mcp"]["transport"] == "streamable-http"
    rest = config(capsys, "openclaw", "--transport", "rest")["memory-mcp"]
    assert rest["vectorSearchUrl"] == "http://localhost:3002/api/lancedb/vector-search?q={query}&limit=5"


def test_a_set_token_adds_a_placeholder_header_and_show_token_prints_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMORY_MCP_TOKEN", TOKEN)

    for client in ("claude", "antigravity"):
        entry = config(capsys, client)["mcpServers"]["memory-mcp"]
        assert entry["headers"] == {"Authorization": "Bearer ${MEMORY_MCP_TOKEN}"}
    shown = config(capsys, "claude", "--show-token")["mcpServers"]["memory-mcp"]
    assert shown["headers"] == {"Authorization": f"Bearer {TOKEN}"}
    assert config(capsys, "openclaw")["mcp"]["servers"]["memory-mcp"]["headers"]["Authorization"].startswith("Bearer ")

    assert main(["config", "openclaw", "--transport", "rest"]) == 0
    assert TOKEN not in capsys.readouterr().out


def test_the_url_comes_from_the_flag_then_memory_mcp_url_then_the_port(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMORY_MCP_PORT", "4100")
    assert config(capsys, "claude")["mcpServers"]["memory-mcp"]["url"] == "http://localhost:4100/mcp"
    monkeypatch.setenv("MEMORY_MCP_URL", "http://memory-mcp:3002/")
    assert config(capsys, "antigravity")["mcpServers"]["memory-mcp"]["serverUrl"] == "http://memory-mcp:3002/mcp"
    assert config(capsys, "claude", "--url", "http://127.0.0.1:9")["mcpServers"]["memory-mcp"]["url"] == (
        "http://127.0.0.1:9/mcp"
    )


def test_rest_transport_is_only_for_openclaw(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "claude", "--transport", "rest"]) == 2
    assert capsys.readouterr().out == ""


def test_the_printed_configs_reach_a_real_server(
    make_settings: SettingsFactory, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMORY_MCP_TOKEN", TOKEN)
    with run_server(make_settings(token=SecretStr(TOKEN))) as live:
        entry = config(capsys, "claude", "--url", live.url, "--show-token")["mcpServers"]["memory-mcp"]
        initialize = {
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "config-test", "version": "0"}},
        }
        mcp = httpx.post(
            entry["url"], json=initialize, headers={**entry["headers"], "Accept": "application/json, text/event-stream"}
        )
        rest = config(capsys, "openclaw", "--transport", "rest", "--url", live.url, "--show-token")["memory-mcp"]
        search = httpx.get(rest["vectorSearchUrl"].replace("{query}", "anything"), headers=rest["headers"])
        refused = httpx.get(rest["vectorSearchUrl"].replace("{query}", "anything"))

    assert mcp.status_code == 200 and "serverInfo" in mcp.text
    assert (search.status_code, search.json()) == (200, [])
    assert refused.status_code == 401


# --- stdio clients: Claude Desktop, Cursor, VS Code -------------------------------------------


@pytest.mark.parametrize(
    ("client", "key"), [("claude-desktop", "mcpServers"), ("cursor", "mcpServers"), ("vscode", "servers")]
)
def test_stdio_clients_get_an_entry_that_runs_memory_mcp_stdio(
    capsys: pytest.CaptureFixture[str], client: str, key: str
) -> None:
    document = config(capsys, client)
    entry = document[key]["memory-mcp"]

    assert set(document) == {key}
    assert Path(entry["command"]).name == "memory-mcp" and Path(entry["command"]).is_absolute()
    assert Path(entry["command"]).is_file()
    assert entry["args"] == ["stdio"]
    assert entry["env"] == {"MEMORY_MCP_URL": "http://localhost:3002"}
    assert entry.get("type") == ("stdio" if client == "vscode" else None)


def test_a_set_token_goes_into_env_in_each_clients_own_placeholder(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMORY_MCP_TOKEN", TOKEN)

    desktop = config(capsys, "claude-desktop")["mcpServers"]["memory-mcp"]["env"]
    assert desktop["MEMORY_MCP_TOKEN"] == "${MEMORY_MCP_TOKEN}"
    assert main(["config", "claude-desktop"]) == 0
    assert "Claude Desktop does not expand" in capsys.readouterr().err
    assert config(capsys, "cursor")["mcpServers"]["memory-mcp"]["env"]["MEMORY_MCP_TOKEN"] == "${env:MEMORY_MCP_TOKEN}"
    vscode = config(capsys, "vscode")
    assert vscode["servers"]["memory-mcp"]["env"]["MEMORY_MCP_TOKEN"] == "${input:memory-mcp-token}"
    assert vscode["inputs"] == [
        {"type": "promptString", "id": "memory-mcp-token", "description": "memory-mcp token", "password": True}
    ]
    shown = config(capsys, "vscode", "--show-token")
    assert shown["servers"]["memory-mcp"]["env"]["MEMORY_MCP_TOKEN"] == TOKEN and "inputs" not in shown


def test_transport_does_not_apply_to_stdio_clients(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "cursor", "--transport", "sse"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "memory-mcp stdio" in captured.err


async def test_the_printed_stdio_entry_reaches_a_real_server(
    make_settings: SettingsFactory, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMORY_MCP_TOKEN", TOKEN)
    with run_server(make_settings(token=SecretStr(TOKEN))) as live:
        entry = config(capsys, "cursor", "--url", live.url, "--show-token")["mcpServers"]["memory-mcp"]
        params = StdioServerParameters(command=entry["command"], args=entry["args"], env=entry["env"])
        async with Client(stdio_client(params), mode="legacy") as client:  # type: ignore[arg-type]
            stored = await client.call_tool("remember", {"content": "Cursor reaches the shared server"})
            listed = await client.call_tool("list_facts", {})

    assert stored.is_error is False, stored
    assert [m["content"] for m in listed.structured_content["memories"]] == ["Cursor reaches the shared server"]  # type: ignore[index]


# --- .env.example -----------------------------------------------------------------------------


def documented_variables() -> dict[str, str]:
    """``NAME=value`` lines of .env.example, commented out or not."""
    text = (REPO / ".env.example").read_text(encoding="utf-8")
    return dict(re.findall(r"^#? ?([A-Z][A-Z0-9_]*)=(.*)$", text, re.MULTILINE))


def env_name(field: str) -> str:
    alias = Settings.model_fields[field].validation_alias
    return alias if isinstance(alias, str) else f"MEMORY_MCP_{field.upper()}"


def default_text(field: str) -> str:
    info = Settings.model_fields[field]
    value = info.default_factory() if info.default_factory else info.default  # type: ignore[call-arg]
    if value is None or value == []:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict):
        return json.dumps(value)
    return str(value)


def test_env_example_lists_every_setting_with_its_default() -> None:
    documented = documented_variables()

    for field in Settings.model_fields:
        name = env_name(field)
        assert name in documented, f"{name} is missing from .env.example"
        assert documented[name] == default_text(field), f"{name}: .env.example says {documented[name]!r}"


def test_env_example_documents_the_cli_and_hook_variables_and_nothing_unknown() -> None:
    known = {env_name(field) for field in Settings.model_fields}
    client = {"MEMORY_MCP_URL", "MEMORY_MCP_HOOK_TIMEOUT_S", "MEMORY_MCP_HOOK_REMEMBER"}

    assert set(documented_variables()) == known | client


def test_env_example_as_a_dotenv_file_gives_the_default_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_settings: SettingsFactory
) -> None:
    make_settings()  # clears MEMORY_MCP_* from the environment and moves to tmp_path
    (tmp_path / ".env").write_text((REPO / ".env.example").read_text(encoding="utf-8"), encoding="utf-8")

    assert Settings() == Settings(_env_file=None)  # type: ignore[call-arg]
