"""A real S3-compatible server for team-mode tests: moto's ``moto_server`` on 127.0.0.1, one bucket per test.

One server per test session (it starts in about a second); a fresh bucket per test, because moto's
LIST walks every key of a bucket and LanceDB lists on every consistent read. Tests opt in with
``from tests.support.s3 import moto_s3, s3_bucket  # noqa: F401`` in their conftest.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support.server import free_port, wait_until_ready

REGION = "us-east-1"
STARTUP_TIMEOUT_S = 60.0


@dataclass
class MotoS3:
    endpoint: str
    process: subprocess.Popen[bytes]

    def create_bucket(self, name: str) -> None:
        """PUT the bucket (moto's server accepts unsigned requests)."""
        response = httpx.put(f"{self.endpoint}/{name}", timeout=10.0, trust_env=False)
        response.raise_for_status()

    def storage_options(self) -> dict[str, str]:
        """What LanceDB needs to reach this server: endpoint, plain HTTP, any static key, a region."""
        return {"aws_endpoint": self.endpoint, "allow_http": "true", "aws_access_key_id": "test",
                "aws_secret_access_key": "test", "aws_region": REGION}


@dataclass
class Bucket:
    s3: MotoS3
    name: str

    def uri(self, prefix: str = "team") -> str:
        return f"s3://{self.name}/{prefix}"

    def env(self, prefix: str = "team") -> dict[str, str]:
        """Environment of a memory-mcp process that keeps its table here (no credentials looked up elsewhere)."""
        return {
            "MEMORY_MCP_DB_PATH": self.uri(prefix),
            "MEMORY_MCP_STORAGE_OPTIONS": json.dumps(self.s3.storage_options()),
            "AWS_EC2_METADATA_DISABLED": "true",
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
        }


@pytest.fixture(scope="session")
def moto_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoS3]:
    """``moto_server`` on 127.0.0.1 and a free port, for the whole session."""
    port = free_port()
    log_path: Path = tmp_path_factory.mktemp("moto") / "moto_server.log"
    server = Path(sys.executable).with_name("moto_server")
    with log_path.open("wb") as log:
        process = subprocess.Popen([str(server), "-H", "127.0.0.1", "-p", str(port)], stdout=log,
                                   stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        wait_until_ready(endpoint, process, STARTUP_TIMEOUT_S, path="/", name="moto_server")
        yield MotoS3(endpoint=endpoint, process=process)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


@pytest.fixture
def s3_bucket(moto_s3: MotoS3) -> Bucket:
    """A new, empty bucket for this test."""
    name = f"test-{uuid.uuid4().hex[:16]}"
    moto_s3.create_bucket(name)
    return Bucket(moto_s3, name)
