"""MCP recall and REST vector-search rank with the same hybrid (one service method behind both): the list is
ordered by ``score``, ``similarity`` is the cosine LanceDB computes, and identical texts come back once."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import lancedb
import numpy as np
import pytest

from app.memory.embeddings.hashing import HashEmbedder
from app.settings import Settings
from tests.conftest import SettingsFactory
from tests.mcp.clients import streamable_session
from tests.support.server import run_server

TARGET = "the migration ticket TASK-00042 waits on the database owner"
NOTES = [*(f"status of TASK-000{n} on the board" for n in (41, 43, 44, 45)), TARGET, "部署腳本放在 scripts 目錄"]
QUERIES = ("status of TASK-00042", "部署腳本", "database owner")


async def _cosines(settings: Settings, query: str) -> dict[str, float]:
    """``1 - _distance`` of every row, from LanceDB's own cosine search (not the server's code path)."""
    table = lancedb.connect(str(settings.db_path), read_consistency_interval=timedelta(0)).open_table(settings.table)
    vector = await HashEmbedder(256).embed_query(query)
    rows = table.search(vector.astype(np.float32), vector_column_name="vector").distance_type("cosine") \
        .select(["id", "_distance"]).limit(1000).to_list()
    return {row["id"]: 1.0 - float(row["_distance"]) for row in rows}


def _non_increasing(values: list[float]) -> bool:
    return all(earlier >= later for earlier, later in zip(values, values[1:], strict=False))


async def test_mcp_recall_and_rest_vector_search_return_the_same_hybrid_order(make_settings: SettingsFactory) -> None:
    with run_server(make_settings(rank_lexical_weight=1.0)) as server:
        async with httpx.AsyncClient(base_url=server.url + "/api/lancedb", timeout=30) as rest, \
                streamable_session(server.url) as client:
            texts = {(await rest.post("/memories", json={"text": text})).json()["id"]: text for text in NOTES}
            for query in QUERIES:
                rest_hits = (await rest.get("/vector-search", params={"q": query, "limit": 4})).json()
                found = await client.call_tool("recall", {"query": query, "top_k": 4})
                mcp_hits = found.structured_content["memories"]  # type: ignore[index]
                assert [h["memory_id"] for h in mcp_hits] == [h["id"] for h in rest_hits], query
                assert [h["score"] for h in mcp_hits] == [h["score"] for h in rest_hits], query
                assert [h["similarity"] for h in mcp_hits] == [h["similarity"] for h in rest_hits], query
                if "TASK-00042" in query:
                    assert texts[rest_hits[0]["id"]] == TARGET


async def test_score_orders_the_list_and_similarity_is_lancedbs_cosine_over_mcp_and_rest(
        make_settings: SettingsFactory) -> None:
    settings = make_settings(rank_lexical_weight=1.0)
    with run_server(settings) as server:
        async with httpx.AsyncClient(base_url=server.url + "/api/lancedb", timeout=30) as rest, \
                streamable_session(server.url) as client:
            for text in NOTES:
                assert (await rest.post("/memories", json={"text": text})).status_code == 200
            await server.flush_memories()  # into the table, whose cosines the hits are compared with
            reordered = False
            for query in QUERIES:
                cosines = await _cosines(settings, query)
                rest_hits = (await rest.get("/vector-search", params={"q": query, "limit": 5})).json()
                found = await client.call_tool("recall", {"query": query, "top_k": 5})
                mcp_hits: list[dict[str, Any]] = found.structured_content["memories"]  # type: ignore[index]
                for hits, key in ((rest_hits, "id"), (mcp_hits, "memory_id")):
                    assert len(hits) == 5 and _non_increasing([hit["score"] for hit in hits]), (query, hits)
                    for hit in hits:
                        assert hit["similarity"] == pytest.approx(cosines[hit[key]], abs=1e-5), (query, hit)
                        assert 0.0 <= hit["score"] <= 1.0, (query, hit)
                similarities = [hit["similarity"] for hit in rest_hits]
                reordered = reordered or not _non_increasing(similarities)
            # The keyword bonus put a less similar memory first somewhere, so score and similarity differ.
            assert reordered


async def test_identical_texts_come_back_once_naming_the_other_copies_over_mcp_and_rest(
        make_settings: SettingsFactory) -> None:
    with run_server(make_settings()) as server:
        async with httpx.AsyncClient(base_url=server.url + "/api/lancedb", timeout=30) as rest, \
                streamable_session(server.url) as client:
            async def store(text: str, scope: str = "global") -> str:
                return str((await rest.post("/memories", json={"text": text, "scope": scope})).json()["id"])

            copies = [await store("the staging database is read-only on sundays") for _ in range(3)]
            elsewhere = await store("the staging database is read-only on sundays", "agent:antigravity")
            others = [await store(f"the staging database note number {n}") for n in range(3)]
            query = "the staging database is read-only on sundays"
            rest_hits = (await rest.get("/vector-search", params={"q": query, "limit": 4})).json()
            found = await client.call_tool("recall", {"query": query, "top_k": 4})
            mcp_hits = found.structured_content["memories"]  # type: ignore[index]
            keyword_hits = (await rest.get("/search", params={"q": "read-only on sundays"})).json()
            assert len((await rest.get("/memories", params={"limit": 50})).json()) == 7  # nothing was deleted
    for hits, key in ((rest_hits, "id"), (mcp_hits, "memory_id")):
        groups = _groups(hits, key)
        assert len(hits) == len(groups) == 4  # filled up with other memories, not with copies
        # The three copies are one hit; the same text in another scope is another memory.
        assert {frozenset(copies), frozenset([elsewhere])} <= groups
        assert groups - {frozenset(copies), frozenset([elsewhere])} <= {frozenset([other]) for other in others}
    assert _groups(keyword_hits, "id") == {frozenset(copies), frozenset([elsewhere])}


def _groups(hits: list[dict[str, Any]], key: str) -> set[frozenset[str]]:
    """Each hit with the copies it stands for, as a set of ids."""
    return {frozenset([hit[key], *hit["duplicate_ids"]]) for hit in hits}
