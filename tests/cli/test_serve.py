"""``memory-mcp serve`` as a real process: loopback by default, no open bind without a token."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest

from tests.kanban.support import wait_for_probe, wait_gone, write_job_script
from tests.support.server import free_port, spawn_server, wait_until_loaded, wait_until_ready


def clean_env(tmp_path: Path) -> dict[str, str]:
    """The developer's MEMORY_MCP_* never leak in; data goes to tmp_path; the fast hash embedder."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_MCP_") and k != "JINA_API_KEY"}
    env.update(
        MEMORY_MCP_DB_PATH=str(tmp_path / "lancedb"),
        MEMORY_MCP_KANBAN_DB=str(tmp_path / "kanban.sqlite3"),
        MEMORY_MCP_EMBEDDING_PROVIDER="hash",
    )
    return env


def ended(pid: int, timeout: float = 10.0) -> bool:
    """Whether ``pid`` is gone or a zombie within ``timeout`` (not our child: polled with a deadline)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.10"])
def test_non_loopback_bind_without_token_exits_2_before_opening_anything_naming_the_fix(
    tmp_path: Path, host: str
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "app.cli", "serve", "--host", host, "--port", str(free_port())],
        env=clean_env(tmp_path),
        cwd=tmp_path,
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert not (tmp_path / "lancedb").exists() and not (tmp_path / "kanban.sqlite3").exists()
    message = result.stderr.decode()
    assert "MEMORY_MCP_TOKEN" in message and "--allow-remote" in message


@pytest.mark.parametrize(("variable", "value"), [
    ("MEMORY_MCP_AGENT_TOKENS", '{"tok-SECRET-0123456789": "bob"'),
    ("MEMORY_MCP_STORAGE_OPTIONS", '{"aws_secret_access_key": "SECRET"'),
    ("MEMORY_MCP_AGENT_TOKENS", '{"tok-SECRET": "bob"}'),
])
def test_a_bad_setting_ends_start_up_with_one_line_and_status_2(tmp_path: Path, variable: str, value: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "app.cli", "serve", "--port", str(free_port())],
        env=clean_env(tmp_path) | {variable: value}, cwd=tmp_path, capture_output=True, timeout=60,
    )
    [line] = result.stderr.decode().splitlines()
    assert result.returncode == 2 and result.stdout == b""
    assert line.startswith(f"memory-mcp: {variable}: ") and "SECRET" not in line
    assert not (tmp_path / "lancedb").exists()


@dataclass
class DefaultServer:
    port: int
    log_path: Path


@pytest.fixture(scope="module")
def default_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DefaultServer]:
    """``memory-mcp serve --port N`` with no host anywhere in its environment or arguments (one per module)."""
    tmp_path = tmp_path_factory.mktemp("default-server")
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
        yield DefaultServer(port, log_path)
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(15)


@pytest.mark.slow
def test_default_bind_listens_on_loopback_only(default_server: DefaultServer) -> None:
    listening = {
        conn.laddr.ip
        for conn in psutil.net_connections(kind="inet")
        if conn.status == psutil.CONN_LISTEN and conn.laddr.port == default_server.port
    }
    assert listening and listening <= {"127.0.0.1", "::1"}, listening


@pytest.mark.slow
def test_a_busy_port_is_an_error_before_ready_and_names_the_fix(default_server: DefaultServer, tmp_path: Path) -> None:
    second = tmp_path / "second"
    second.mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "app.cli", "serve", "--port", str(default_server.port)],
        env=clean_env(second), cwd=second, capture_output=True, timeout=60,
    )
    output = (result.stdout + result.stderr).decode()
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{default_server.port}" in output and "--port" in output
    assert "memory-mcp listening" not in output and "memory-mcp ready" not in output
    assert not (second / "lancedb").exists()  # nothing was opened


@pytest.mark.slow
def test_the_start_line_gives_the_dashboard_and_mcp_urls(default_server: DefaultServer) -> None:
    [ready] = [line for line in default_server.log_path.read_text().splitlines() if "memory-mcp listening" in line]
    base = f"http://127.0.0.1:{default_server.port}"
    assert f"{base}/ " in ready and f"{base}/mcp " in ready and f"{base}/mcp/sse " in ready


@pytest.mark.slow
def test_after_kill_9_with_a_job_running_the_port_is_free_and_the_next_server_reaps_the_job(tmp_path: Path) -> None:
    script = write_job_script(tmp_path / "jobs").resolve()
    env = clean_env(tmp_path) | {"MEMORY_MCP_JOB_COMMAND": str(script), "MEMORY_MCP_JOBS_ALLOW_ROOT": "true"}
    port = free_port()
    with spawn_server(env, log_path=tmp_path / "first.log", port=port) as first:
        job = httpx.post(f"{first.url}/api/kanban/jobs", json={"args": ["hang"]}, trust_env=False).json()
        probe = wait_for_probe(script, job["id"])
        first.process.kill()  # SIGKILL: no shutdown code runs
        first.process.wait(10)
        killed_at = time.monotonic()
        # The job held none of the server's descriptors, so the port is free at once.
        with socket.create_server(("127.0.0.1", port)):
            pass
        # SIGTERM at the server's death ends the job; its grandchild ignores SIGTERM and is still there.
        assert ended(job["pid"])
        assert not ended(probe["grandchild"], timeout=0)
    with spawn_server(env, log_path=tmp_path / "second.log", port=port, loaded=False) as second:
        rebound_s = time.monotonic() - killed_at  # listening and answering /healthz
        wait_until_loaded(second.url, second.process, 120)  # the board is open: stale jobs were reaped
        record = httpx.get(f"{second.url}/api/kanban/jobs/{job['id']}", trust_env=False).json()
    assert sorted(probe["fds"]) == ["0", "1", "2"], probe["fds"]
    assert record["status"] == "abandoned" and "killed" in record["reason"], record
    assert wait_gone(job["pid"]) == []  # the next server killed the rest of the job's group
    print(f"a new server answered {rebound_s:.1f} s after the kill")  # noqa: T201 - shown with -s
