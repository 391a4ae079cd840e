"""Memory-mcp servers as real processes sharing one table in an S3 bucket (moto), each with its own board."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import lancedb

from tests.support.s3 import Bucket
from tests.support.server import ServerProcess, spawn_server


def team_env(bucket: Bucket, tmp_path: Path, name: str, **extra: str) -> dict[str, str]:
    return {
        **bucket.env(),
        "MEMORY_MCP_EMBEDDING_PROVIDER": "hash",
        "MEMORY_MCP_KANBAN_DB": str(tmp_path / f"kanban-{name}.sqlite3"),  # the board stays local
        "MEMORY_MCP_LOG_FORMAT": "text",
        **extra,
    }


@contextmanager
def team(bucket: Bucket, tmp_path: Path, *extras: dict[str, str]) -> Iterator[list[ServerProcess]]:
    """One server per ``extras`` entry (its extra environment), started one after the other."""
    with ExitStack() as stack:
        servers = []
        for n, extra in enumerate(extras):
            env = team_env(bucket, tmp_path, f"s{n}", **extra)
            servers.append(stack.enter_context(spawn_server(env, log_path=tmp_path / f"server-{n}.log")))
        yield servers


def table(bucket: Bucket, name: str = "memories", prefix: str = "team") -> Any:
    """The shared table, read directly with LanceDB (what is really stored)."""
    return lancedb.connect(bucket.uri(prefix), storage_options=bucket.s3.storage_options()).open_table(name)


BUSY_RETRIES = 20


async def remember(http: httpx.AsyncClient, server: ServerProcess, text: str) -> str:
    """Remember as a client should: a 503 store_busy (past the write's deadline; nothing was written) is
    retried after its Retry-After."""
    for _ in range(BUSY_RETRIES):
        response = await http.post(f"{server.url}/api/lancedb/memories", json={"text": text})
        if response.status_code != 503 or response.json().get("code") != "store_busy":
            break
        await anyio.sleep(float(response.headers.get("Retry-After", "1")))  # the server's back-off, not a sync
    assert response.status_code == 200, response.text
    memory_id: str = response.json()["id"]
    return memory_id


async def recalled_ids(http: httpx.AsyncClient, server: ServerProcess, query: str, limit: int = 5) -> list[str]:
    response = await http.get(f"{server.url}/api/lancedb/vector-search", params={"q": query, "limit": limit})
    assert response.status_code == 200, response.text
    return [hit["id"] for hit in response.json()]
