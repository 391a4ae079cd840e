"""SQL/filter injection strings in every filtered parameter match nothing beyond themselves and change nothing."""

from __future__ import annotations

from urllib.parse import quote

import httpx
import pytest

from tests.mcp.clients import streamable_session
from tests.support.server import LiveServer

PAYLOADS = ["x' OR '1'='1", "' OR 1=1 --", "%", "_", "\\", "\\'", "''", '"', ";--", "') OR ('a'='a", "*", "’",
            "'" * 500]
SEEDS = [
    {"text": "The CI cache lives in /var/cache/ci", "scope": "project:alpha", "category": "ci,cache"},
    {"text": "Deploys are frozen on Fridays", "scope": "agent:claude-code", "category": "process"},
    {"text": "100% of the builds use the _fast_ profile", "scope": "global", "category": "build"},
]


async def _everything(http: httpx.AsyncClient, url: str) -> list[dict[str, object]]:
    response = await http.get(f"{url}/api/lancedb/memories", params={"limit": 200})
    return sorted(response.json(), key=lambda m: str(m["id"]))


def _no_server_error(response: httpx.Response) -> None:
    assert response.status_code < 500, (response.request.url, response.status_code, response.text)


@pytest.mark.parametrize("payload", PAYLOADS, ids=range(len(PAYLOADS)))
async def test_injection_strings_in_rest_parameters_match_nothing_and_change_nothing(
        live_server: LiveServer, payload: str) -> None:
    url = live_server.url
    async with httpx.AsyncClient(timeout=30) as http:
        for seed in SEEDS:
            assert (await http.post(f"{url}/api/lancedb/memories", json=seed)).status_code == 200
        before = await _everything(http, url)
        for params in ({"scope": payload}, {"category": payload}, {"scope": f"agent:{payload}"},
                       {"scope": f"custom:{payload}"}):
            listed = await http.get(f"{url}/api/lancedb/memories", params=params)
            _no_server_error(listed)
            assert listed.status_code == 422 or listed.json() == [], (params, listed.text)
        for route in ("search", "vector-search"):
            found = await http.get(f"{url}/api/lancedb/{route}", params={"q": payload, "scope": payload})
            _no_server_error(found)
            assert found.status_code == 422 or found.json() == []
            unscoped = await http.get(f"{url}/api/lancedb/{route}", params={"q": payload})
            _no_server_error(unscoped)
        keyword = await http.get(f"{url}/api/lancedb/search", params={"q": payload})
        assert all(payload.lower() in hit["text"].lower() for hit in keyword.json())  # substring semantics only
        path = f"{url}/api/lancedb/memories/{quote(payload, safe='')}"
        for response in (await http.get(path), await http.delete(path),
                         await http.patch(path, json={"importance": 0.1})):
            _no_server_error(response)
            assert response.status_code in (404, 405, 422), (response.request.method, response.text)
        assert await _everything(http, url) == before
        async with streamable_session(url) as mcp:
            for arguments in ({"agent": payload}, {"tag": payload}):
                facts = await mcp.call_tool("list_facts", arguments)
                assert facts.is_error or facts.structured_content["memories"] == [], arguments  # type: ignore[index]
            recalled = await mcp.call_tool("recall", {"query": payload, "agent_filter": payload})
            assert recalled.is_error or recalled.structured_content["memories"] == []  # type: ignore[index]
            forgotten = await mcp.call_tool("forget", {"memory_id": payload[:64]})
            assert forgotten.is_error is True
            assert "internal_error" not in forgotten.content[0].text  # type: ignore[union-attr]
        assert await _everything(http, url) == before


async def test_a_stored_value_full_of_sql_metacharacters_is_matched_exactly_and_only_by_itself(
        live_server: LiveServer) -> None:
    url = live_server.url
    odd_tag = "it's_100%\\done\";--"
    async with httpx.AsyncClient(timeout=30) as http:
        target = await http.post(f"{url}/api/lancedb/memories", json={"text": "odd tag row", "category": odd_tag})
        decoy = await http.post(f"{url}/api/lancedb/memories", json={"text": "decoy row", "category": "its_100done"})
        assert target.status_code == decoy.status_code == 200, (target.text, decoy.text)
        exact = await http.get(f"{url}/api/lancedb/memories", params={"category": odd_tag})
        assert [m["id"] for m in exact.json()] == [target.json()["id"]]
        for near_miss in ("it's_100%", "%", "it_s_100%\\done\";--", odd_tag.upper()):
            missed = await http.get(f"{url}/api/lancedb/memories", params={"category": near_miss})
            assert missed.json() == [], near_miss
