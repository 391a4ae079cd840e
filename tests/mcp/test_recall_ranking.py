"""MCP recall and REST vector-search rank with the same hybrid (one service method behind both)."""

from __future__ import annotations

import httpx

from tests.conftest import SettingsFactory
from tests.mcp.clients import streamable_session
from tests.support.server import run_server

TARGET = "the migration ticket TASK-00042 waits on the database owner"
NOTES = [*(f"status of TASK-000{n} on the board" for n in (41, 43, 44, 45)), TARGET, "部署腳本放在 scripts 目錄"]


async def test_mcp_recall_and_rest_vector_search_return_the_same_hybrid_order(make_settings: SettingsFactory) -> None:
    with run_server(make_settings(rank_lexical_weight=1.0)) as server:
        async with httpx.AsyncClient(base_url=server.url + "/api/lancedb", timeout=30) as rest, \
                streamable_session(server.url) as client:
            texts = {(await rest.post("/memories", json={"text": text})).json()["id"]: text for text in NOTES}
            for query in ("status of TASK-00042", "部署腳本", "database owner"):
                rest_hits = (await rest.get("/vector-search", params={"q": query, "limit": 4})).json()
                found = await client.call_tool("recall", {"query": query, "top_k": 4})
                mcp_hits = found.structured_content["memories"]  # type: ignore[index]
                assert [h["memory_id"] for h in mcp_hits] == [h["id"] for h in rest_hits], query
                assert [h["score"] for h in mcp_hits] == [h["score"] for h in rest_hits], query
                if "TASK-00042" in query:
                    assert texts[rest_hits[0]["id"]] == TARGET
