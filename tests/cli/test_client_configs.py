"""``memory-mcp doctor`` reads the MCP clients' config files and says which entries for this server connect."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from app.cli.client_configs import check_client_configs
from tests.mcp.clients import EXPECTED_TOOLS, sse_session
from tests.support.server import LiveServer

SERVER = "http://127.0.0.1:3002"
REPO = Path(__file__).resolve().parents[2]


def write(path: Path, document: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


@pytest.fixture
def dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    monkeypatch.delenv("MEMORY_MCP_TOKEN", raising=False)
    monkeypatch.delenv("APPDATA", raising=False)
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    return home, project


def fixes(checks: list[Any]) -> list[dict[str, Any]]:
    return [json.loads(check.fix.removeprefix("use ")) for check in checks if check.status != "ok"]


def test_the_specs_claude_json_entry_without_type_fails_with_the_corrected_entry(dirs: tuple[Path, Path]) -> None:
    home, project = dirs
    write(home / ".claude.json", {"mcpServers": {"memory-mcp": {"url": "http://localhost:3002/mcp/sse"}}})
    [check] = check_client_configs(SERVER, home, project)
    assert check.status == "fail"
    assert '"type"' in check.detail and "skips the entry" in check.detail
    assert fixes([check]) == [{"memory-mcp": {"type": "sse", "url": f"{SERVER}/mcp/sse"}}]


def test_claude_code_project_entries_and_mcp_json_are_read_and_good_ones_pass(dirs: tuple[Path, Path]) -> None:
    home, project = dirs
    good = {"type": "http", "url": "http://localhost:3002/mcp"}
    write(home / ".claude.json", {"projects": {"/src/app": {"mcpServers": {"memory": good}},
                                               "/src/other": {"mcpServers": {"memory": {"type": "http",
                                                                                        "url": f"{SERVER}/mcp/sse"}}}},
                                  "mcpServers": {"unrelated": {"type": "http", "url": "http://example.com/mcp"}}})
    write(project / ".mcp.json", {"mcpServers": {"shared-memory": {"type": "sse", "url": f"{SERVER}/mcp/sse"}}})
    checks = check_client_configs(SERVER, home, project)
    assert [check.status for check in checks] == ["ok", "fail", "ok"]  # the unrelated server is not ours to judge
    assert "projects[/src/app]" in checks[0].detail
    assert '"type": "http" does not fit /mcp/sse' in checks[1].detail
    assert fixes(checks) == [{"memory": {"type": "sse", "url": f"{SERVER}/mcp/sse"}}]


def test_a_token_the_entry_does_not_send_or_gets_wrong_is_flagged(
    dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    home, project = dirs
    monkeypatch.setenv("MEMORY_MCP_TOKEN", "the-right-token-0123")
    write(project / ".mcp.json", {"mcpServers": {
        "memory-mcp": {"type": "http", "url": f"{SERVER}/mcp"},
        "memory-wrong": {"type": "http", "url": f"{SERVER}/mcp", "headers": {"Authorization": "Bearer old"}},
        "memory-env": {"type": "http", "url": f"{SERVER}/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}},
    }})
    missing, wrong, expanded = check_client_configs(SERVER, home, project)
    assert "no Authorization header" in missing.detail
    assert "another token" in wrong.detail
    assert expanded.status == "ok"
    assert fixes([missing])[0]["memory-mcp"]["headers"] == {"Authorization": "Bearer ${MEMORY_MCP_TOKEN}"}


def test_each_clients_own_rules(dirs: tuple[Path, Path]) -> None:
    home, project = dirs
    write(home / ".config" / "Claude" / "claude_desktop_config.json",
          {"mcpServers": {"memory-mcp": {"url": f"{SERVER}/mcp"}}})
    write(home / ".cursor" / "mcp.json", {"mcpServers": {"memory-mcp": {"url": f"{SERVER}/mcp"}}})
    write(project / ".vscode" / "mcp.json", {"servers": {"memory-mcp": {"url": f"{SERVER}/mcp"}}})
    write(home / ".gemini" / "antigravity" / "mcp_config.json",
          {"mcpServers": {"memory-mcp": {"url": "http://localhost:3003/mcp"}}})
    desktop, cursor, vscode, antigravity = check_client_configs(SERVER, home, project)
    assert "commands only" in desktop.detail and fixes([desktop])[0]["memory-mcp"]["args"] == ["stdio"]
    assert cursor.status == "ok"
    assert desktop.status == "fail" and cursor.status == "ok"
    assert vscode.status == "fail" and fixes([vscode]) == [{"memory-mcp": {"type": "http", "url": f"{SERVER}/mcp"}}]
    assert "serverUrl" in antigravity.detail and "not where the server listens" in antigravity.detail
    assert antigravity.status == "warn"  # another port: perhaps another server of the same name
    assert fixes([antigravity]) == [{"memory-mcp": {"serverUrl": f"{SERVER}/mcp"}}]


def test_a_stdio_entry_with_a_missing_command_is_flagged(dirs: tuple[Path, Path]) -> None:
    home, project = dirs
    write(home / ".cursor" / "mcp.json", {"mcpServers": {"memory-mcp": {
        "command": "/nowhere/memory-mcp", "args": ["stdio"], "env": {"MEMORY_MCP_URL": SERVER}}}})
    [check] = check_client_configs(SERVER, home, project)
    assert "not found" in check.detail
    assert fixes([check])[0]["memory-mcp"]["args"] == ["stdio"]


def test_doctor_prints_the_check_and_the_corrected_entry(dirs: tuple[Path, Path], tmp_path: Path) -> None:
    home, project = dirs
    write(home / ".claude.json", {"mcpServers": {"memory-mcp": {"url": "http://localhost:3002/mcp/sse"}}})
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "MEMORY_MCP_EMBEDDING_PROVIDER": "hash",
           "MEMORY_MCP_DB_PATH": str(tmp_path / "lancedb"), "MEMORY_MCP_KANBAN_DB": str(tmp_path / "k.sqlite3"),
           "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "app.cli", "doctor", "--url", "http://127.0.0.1:3002"],
                          cwd=project, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert "client_config" in done.stdout, done.stdout + done.stderr
    assert '"type": "sse"' in done.stdout


def run_doctor(live: LiveServer, home: Path, project: Path) -> subprocess.CompletedProcess[str]:
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "MEMORY_MCP_EMBEDDING_PROVIDER": "hash",
           "MEMORY_MCP_DB_PATH": str(live.settings.db_path), "MEMORY_MCP_KANBAN_DB": str(live.settings.kanban_db),
           "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "app.cli", "doctor", "--url", live.url],
                          cwd=project, env=env, capture_output=True, text=True, timeout=120, check=False)


async def test_doctor_fails_on_an_entry_claude_code_skips_and_its_printed_sse_entry_connects(
    dirs: tuple[Path, Path], live_server: LiveServer
) -> None:
    home, project = dirs
    write(home / ".claude.json", {"mcpServers": {"memory-mcp": {"url": f"{live_server.url}/mcp/sse"}}})
    broken = run_doctor(live_server, home, project)
    [line] = [line for line in broken.stdout.splitlines() if "client_config" in line]
    fix = next(line for line in broken.stdout.splitlines() if line.strip().startswith("fix: use {"))
    entry = json.loads(fix.strip().removeprefix("fix: use "))["memory-mcp"]
    assert line.split()[0] == "FAIL", broken.stdout
    assert broken.returncode == 1
    assert entry == {"type": "sse", "url": f"{live_server.url}/mcp/sse"}

    write(home / ".claude.json", {"mcpServers": {"memory-mcp": entry}})
    fixed = run_doctor(live_server, home, project)
    assert fixed.returncode == 0, fixed.stdout
    async with sse_session(entry["url"].removesuffix("/mcp/sse")) as client:
        listed = await client.list_tools()
    assert {tool.name for tool in listed.tools} == EXPECTED_TOOLS
