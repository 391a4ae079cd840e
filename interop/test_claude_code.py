"""Claude Code's own CLI connects to memory-mcp over Streamable HTTP, legacy SSE and the stdio bridge.

``claude mcp add`` then ``claude mcp list`` (which starts each server's MCP handshake and needs no login),
with a throw-away HOME. The CLI comes from npm (``@anthropic-ai/claude-code``), installed once into a cache
outside the repository.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from app.settings import Settings
from tests.support.server import LiveServer, run_server

CLAUDE_DIR = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "memory-mcp-tests" / "claude"
CLAUDE_SPEC = "@anthropic-ai/claude-code@2"
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def claude() -> Path:
    """The Claude Code CLI, installed with npm on first use."""
    binary = CLAUDE_DIR / "node_modules" / ".bin" / "claude"
    if not binary.exists():
        npm = shutil.which("npm")
        assert npm is not None, "npm is needed to install Claude Code's CLI"
        CLAUDE_DIR.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([npm, "install", "--prefix", str(CLAUDE_DIR), "--no-audit", "--no-fund", CLAUDE_SPEC],
                              capture_output=True, text=True, timeout=600, check=False)
        assert done.returncode == 0, done.stderr
    return binary


@pytest.fixture
def live(settings: Settings) -> LiveServer:
    with run_server(settings) as server:
        yield server


def run_claude(claude: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "DISABLE_AUTOUPDATER": "1",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
    return subprocess.run([str(claude), *args], cwd=home, env=env, capture_output=True, text=True, timeout=180,
                          check=False)


def listed(claude: Path, home: Path) -> dict[str, str]:
    """``claude mcp list``: server name → its status line."""
    done = run_claude(claude, home, "mcp", "list")
    return {match[1]: match[2] for match in re.finditer(r"^([\w-]+): .* - (.+)$", done.stdout, flags=re.M)}


def test_claude_code_connects_over_http_sse_and_the_stdio_bridge(
    claude: Path, live: LiveServer, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    added = [
        run_claude(claude, home, "mcp", "add", "-s", "user", "--transport", "http", "mm-http", f"{live.url}/mcp"),
        run_claude(claude, home, "mcp", "add", "-s", "user", "--transport", "sse", "mm-sse", f"{live.url}/mcp/sse"),
        run_claude(claude, home, "mcp", "add", "mm-stdio", "-s", "user", "-e", f"MEMORY_MCP_URL={live.url}",
                   "-e", f"PYTHONPATH={REPO}", "--", sys.executable, "-m", "app.cli", "stdio"),
    ]
    assert [done.returncode for done in added] == [0, 0, 0], [done.stderr for done in added]
    statuses = listed(claude, home)
    assert set(statuses) == {"mm-http", "mm-sse", "mm-stdio"}, statuses
    assert all("Connected" in status and "Failed" not in status for status in statuses.values()), statuses


def test_the_sse_entry_doctor_prints_for_a_skipped_entry_connects_in_claude_code(
    claude: Path, live: LiveServer, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / ".claude.json").write_text(json.dumps({"mcpServers": {"memory-mcp": {"url": f"{live.url}/mcp/sse"}}}))
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "MEMORY_MCP_EMBEDDING_PROVIDER": "hash",
           "MEMORY_MCP_DB_PATH": str(live.settings.db_path), "MEMORY_MCP_KANBAN_DB": str(live.settings.kanban_db)}
    doctor = subprocess.run([sys.executable, "-m", "app.cli", "doctor", "--url", live.url], cwd=home, env=env,
                            capture_output=True, text=True, timeout=120, check=False)
    fix = next(line.strip().removeprefix("fix: use ") for line in doctor.stdout.splitlines()
               if line.strip().startswith("fix: use {"))
    assert doctor.returncode == 1
    assert "Connected" not in listed(claude, home).get("memory-mcp", "")  # Claude Code skips the entry

    (home / ".claude.json").write_text(json.dumps({"mcpServers": json.loads(fix)}))
    assert "Connected" in listed(claude, home)["memory-mcp"]
