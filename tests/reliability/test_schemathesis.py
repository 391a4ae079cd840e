"""Schema fuzzing of the REST API (schemathesis, every check): the server and its OpenAPI schema agree.

``--checks all`` holds the server to its schema both ways: no 5xx, only documented statuses, bodies that
match (``{detail, code}`` for errors), schema-valid requests accepted and schema-invalid ones refused, a
405 naming every method of the path, the token required, created resources readable and deleted ones gone.
The run is bounded by examples per operation (about 100 s on two cores, most of it the coverage phase),
not by ``--max-time``, which schemathesis would spend in full.

Stateful runs follow the links the schema declares. Schemathesis's own link guessing is off: from
``GET /jobs`` it feeds a job's ``task_id`` into ``/tasks/{task_id}``, a null one as the text ``None``, and
then counts the server's 422 for that malformed id against it as a valid request refused.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from tests.conftest import SettingsFactory
from tests.support.server import LiveServer, run_server

TOKEN = "fuzz-token-0123456789"
MAX_EXAMPLES = 5
CONFIG = '[phases.stateful.inference]\nalgorithms = ["location-headers"]\n'
HARD_TIMEOUT_S = 170  # the CI budget for this test is three minutes


@pytest.fixture
def fuzzed_server(make_settings: SettingsFactory, tmp_path: Path) -> Iterator[LiveServer]:
    """A server with a token and a harmless job command (without one, jobs are a correct 503 job_not_configured)."""
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")
    script.chmod(0o700)
    settings = make_settings(token=TOKEN, jobs_allow_root=True, job_command=[str(script)], job_timeout_s=5)
    with run_server(settings) as server:
        yield server


@pytest.mark.slow
@pytest.mark.long  # `make check-long`
async def test_every_schemathesis_check_passes_against_a_live_server_with_a_token(fuzzed_server: LiveServer,
                                                                                  tmp_path: Path) -> None:
    url = fuzzed_server.url
    st = Path(sys.executable).with_name("st")
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG, encoding="utf-8")
    command = [
        str(st), "--config-file", str(config), "run", f"{url}/openapi.json", "--checks", "all", "--workers", "1",
        "--max-examples", str(MAX_EXAMPLES), "--max-failures", "20", "--request-timeout", "20",
        "--phases", "examples,coverage,fuzzing,stateful", "--seed", "1", "--no-color",
        "--report", "junit", "--report-dir", str(tmp_path / "report"),
        "-H", f"Authorization: Bearer {TOKEN}", "-H", f"Origin: {url}",
    ]
    result = await anyio.to_thread.run_sync(
        lambda: subprocess.run(command, capture_output=True, text=True, timeout=HARD_TIMEOUT_S, check=False))
    summary = result.stdout[-6000:]
    print(f"\nSCHEMATHESIS exit={result.returncode}\n{summary}")  # noqa: T201
    assert "test cases" in summary.lower(), summary + result.stderr[-2000:]  # it ran, and said how much
    assert result.returncode == 0, summary + result.stderr[-2000:]
