"""Shared pieces of the reliability scenarios: server env, REST/MCP writers that log a history."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx
from mcp import Client

from tests.harness.history import HistoryLog, tagged_text

# Read at import: the make_settings fixture removes every MEMORY_MCP_* variable from the environment.
LOAD_SCALE = float(os.environ.get("MEMORY_MCP_LOAD_SCALE", "1"))


def server_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """Environment of a subprocess server on temp dirs with the hash embedder."""
    env = {
        "MEMORY_MCP_DB_PATH": str(tmp_path / "lancedb"),
        "MEMORY_MCP_KANBAN_DB": str(tmp_path / "kanban.sqlite3"),
        "MEMORY_MCP_EMBEDDING_PROVIDER": "hash",
    }
    env.update(extra)
    return env


def scaled(count: int) -> int:
    return max(1, round(count * LOAD_SCALE))


async def rest_remember(http: httpx.AsyncClient, url: str, history: HistoryLog, crid: str,
                        body: str = "reliability write") -> httpx.Response | None:
    """POST one memory and log the outcome: 200 ok; 4xx, 503 or no connection fail (nothing written); else info."""
    with history.invoke("remember", crid) as op:
        try:
            response = await http.post(f"{url}/api/lancedb/memories", json={"text": tagged_text(crid, body)})
        except httpx.ConnectError as exc:
            op.fail(f"never sent: {type(exc).__name__}")  # no connection, so the server never saw it
            return None
        except httpx.HTTPError as exc:
            op.info(type(exc).__name__)
            return None
        if response.status_code == 200:
            op.ok(response.json()["id"])
        elif 400 <= response.status_code < 500 or response.status_code == 503:
            op.fail(f"{response.status_code} {response.text[:200]}")
        else:
            op.info(f"{response.status_code} {response.text[:200]}")
        return response


async def mcp_remember(client: Client, history: HistoryLog, crid: str, body: str = "reliability write") -> Any:
    """Call the remember tool and log the outcome (isError counts as a definite rejection)."""
    with history.invoke("remember", crid) as op:
        result = await client.call_tool("remember", {"content": tagged_text(crid, body)})
        if result.is_error:
            op.fail(str(result.content[0])[:200])
        else:
            op.ok(result.structured_content["memory_id"])  # type: ignore[index]
        return result
