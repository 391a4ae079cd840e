"""Memory-mcp servers as real processes sharing one table in an S3 bucket (moto), and, in team mode proper, one
PostgreSQL database for the board and the write journal (``MEMORY_MCP_TEAM_DB``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import lancedb

from tests.mcp.clients import poll_until
from tests.support.s3 import Bucket
from tests.support.server import ServerProcess, spawn_server


def team_env(bucket: Bucket, tmp_path: Path, name: str, team_db: str | None = None, **extra: str) -> dict[str, str]:
    """A server of the team: with ``team_db``, board and journal in that database; without, a board of its
    own and the journal of its machine (``tmp_path``)."""
    shared = {"MEMORY_MCP_TEAM_DB": team_db} if team_db else {
        "MEMORY_MCP_KANBAN_DB": str(tmp_path / f"kanban-{name}.sqlite3")}
    return {
        **bucket.env(),
        "MEMORY_MCP_EMBEDDING_PROVIDER": "hash",
        "MEMORY_MCP_LOG_FORMAT": "text",
        **shared,
        **extra,
    }


@contextmanager
def team(bucket: Bucket, tmp_path: Path, *extras: dict[str, str],
         team_db: str | None = None) -> Iterator[list[ServerProcess]]:
    """One server per ``extras`` entry (its extra environment), started one after the other."""
    with ExitStack() as stack:
        servers = []
        for n, extra in enumerate(extras):
            env = team_env(bucket, tmp_path, f"s{n}", team_db, **extra)
            servers.append(stack.enter_context(spawn_server(env, log_path=tmp_path / f"server-{n}.log")))
        yield servers


def table(bucket: Bucket, name: str = "memories", prefix: str = "team") -> Any:
    """The shared table, read directly with LanceDB (what is really stored)."""
    return lancedb.connect(bucket.uri(prefix), storage_options=bucket.s3.storage_options()).open_table(name)


async def remember(http: httpx.AsyncClient, server: ServerProcess, text: str) -> str:
    """Remember once: the journal never refuses a write for slowness."""
    response = await http.post(f"{server.url}/api/lancedb/memories", json={"text": text})
    assert response.status_code == 200, response.text
    memory_id: str = response.json()["id"]
    return memory_id


async def recalled_ids(http: httpx.AsyncClient, server: ServerProcess, query: str, limit: int = 5) -> list[str]:
    response = await http.get(f"{server.url}/api/lancedb/vector-search", params={"q": query, "limit": limit})
    assert response.status_code == 200, response.text
    return [hit["id"] for hit in response.json()]


async def journals_flushed(http: httpx.AsyncClient, servers: list[ServerProcess], within_s: float = 60.0) -> None:
    """Until no server's journal holds a write the table lacks (the servers are killed, not stopped, at the
    end of ``team``: what is acknowledged is durable in the journal, and reaches the table with the flushes)."""
    async def depths() -> list[object]:
        return [(await http.get(f"{server.url}/readyz")).json()["memory"]["journal"] for server in servers]

    await poll_until(depths, lambda journals: all(j["depth"] == 0 for j in journals), within_s=within_s)
