"""``memory-mcp serve`` as a real process: loopback by default, no open bind without a token."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.support.server import free_port, wait_until_ready


def clean_env(tmp_path: Path) -> dict[str, str]:
    """The developer's MEMORY_MCP_* never leak in; data goes to tmp_path; the fast hash embedder."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_MCP_") and k != "JINA_API_KEY"}
    env.update(
        MEMORY_MCP_DB_PATH=str(tmp_path / "lancedb"),
        MEMORY_MCP_KANBAN_DB=str(tmp_path / "kanban.sqlite3"),
        MEMORY_MCP_EMBEDDING_PROVIDER="hash",
    )
    return env


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.10"])
def test_non_loopback_bind_without_token_exits_nonzero_within_5_s_naming_the_fix(tmp_path: Path, host: str) -> None:
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "app.cli", "serve", "--host", host, "--port", str(free_port())],
        env=clean_env(tmp_path),
        cwd=tmp_path,
        capture_output=True,
        timeout=5,
    )
    assert result.returncode != 0
    assert time.monotonic() - started < 5
    message = result.stderr.decode()
    assert "MEMORY_MCP_TOKEN" in message and "--allow-remote" in message


@pytest.fixture
def default_server(tmp_path: Path) -> Iterator[int]:
    """``memory-mcp serve --port N`` with no host anywhere in its environment or arguments."""
    port = free_port()
    log_path = tmp_path / "server.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve", "--port", str(port)],
            env=clean_env(tmp_path),
            cwd=tmp_path,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until_ready(f"http://127.0.0.1:{port}", process, timeout=60)
        yield port
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(15)


@pytest.mark.slow
def test_default_bind_listens_on_loopback_only(default_server: int) -> None:
    listening = {
        conn.laddr.ip
        for conn in psutil.net_connections(kind="inet")
        if conn.status == psutil.CONN_LISTEN and conn.laddr.port == default_server
    }
    assert listening and listening <= {"127.0.0.1", "::1"}, listening


@pytest.mark.slow
def test_a_busy_port_is_an_error_before_ready_and_names_the_fix(default_server: int, tmp_path: Path) -> None:
    second = tmp_path / "second"
    second.mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "app.cli", "serve", "--port", str(default_server)],
        env=clean_env(second), cwd=second, capture_output=True, timeout=60,
    )
    output = (result.stdout + result.stderr).decode()
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{default_server}" in output and "--port" in output
    assert "memory-mcp listening" not in output and "memory-mcp ready" not in output
    assert not (second / "lancedb").exists()  # nothing was opened


@pytest.mark.slow
def test_the_start_line_gives_the_dashboard_and_mcp_urls(tmp_path: Path) -> None:
    port = free_port()
    log_path = tmp_path / "server.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--port", str(port)],
                                   env=clean_env(tmp_path), cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until_ready(f"http://127.0.0.1:{port}", process, timeout=60)
    finally:
        process.terminate()
        process.wait(15)
    [ready] = [line for line in log_path.read_text().splitlines() if "memory-mcp listening" in line]
    base = f"http://127.0.0.1:{port}"
    assert f"{base}/ " in ready and f"{base}/mcp " in ready and f"{base}/mcp/sse " in ready
