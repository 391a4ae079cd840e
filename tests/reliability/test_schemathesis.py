"""Schema fuzzing of the REST API (schemathesis): whatever a client sends, the server never answers 5xx."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from tests.conftest import SettingsFactory
from tests.support.server import LiveServer, run_server

MAX_TIME_S = 45
CHECKS = "not_a_server_error"


@pytest.fixture
def fuzzed_server(make_settings: SettingsFactory, tmp_path: Path) -> Iterator[LiveServer]:
    """A server with a harmless job command: without one, the job route is a (correct) 503 job_not_configured."""
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")
    script.chmod(0o700)
    with run_server(make_settings(jobs_allow_root=True, job_command=[str(script)], job_timeout_s=5)) as server:
        yield server


@pytest.mark.slow
async def test_fuzzed_requests_from_the_openapi_schema_never_get_a_server_error(fuzzed_server: LiveServer,
                                                                                tmp_path: Path) -> None:
    live_server = fuzzed_server
    st = Path(sys.executable).with_name("st")
    command = [
        str(st), "run", f"{live_server.url}/openapi.json", "--checks", CHECKS, "--workers", "1",
        "--max-time", str(MAX_TIME_S), "--max-examples", "40", "--request-timeout", "20",
        "--phases", "examples,coverage,fuzzing", "--seed", "1", "--no-color",
        "--report", "junit", "--report-dir", str(tmp_path / "report"),
        "-H", f"Origin: {live_server.url}",
    ]
    result = await anyio.to_thread.run_sync(
        lambda: subprocess.run(command, capture_output=True, text=True, timeout=MAX_TIME_S + 60, check=False))
    summary = result.stdout[-4000:]
    print(f"\nSCHEMATHESIS exit={result.returncode}\n{summary}")  # noqa: T201
    assert result.returncode == 0, summary + result.stderr[-2000:]
