"""Unicode edge cases round-trip byte-exact over REST and MCP; empty, over-long and control text is refused."""

from __future__ import annotations

import httpx
import pytest

from tests.mcp.clients import streamable_session
from tests.support.server import LiveServer

LIMIT = 8000
ROUND_TRIP = {
    "cjk": "部署前必須用毫秒記錄時間戳 — 日本語のメモ — 한국어 메모",
    "emoji_zwj_and_flags": "family 👩‍👩‍👧 flags 🇯🇵🇺🇦 thumbs 👍🏽 and 🧑🏿‍💻",
    "combining_marks_nfd": "cafe\u0301 n\u0303 A\u030a Z\u0335\u0321\u0327 (NFD, not normalised)",
    "rtl": "مرحبا بالعالم — שלום עולם — mixed ltr",
    "bidi_and_invisibles": "abc\u202edcba\u202c zero\u200bwidth word\u2060joiner \ufeffbom",
    "tabs_and_newlines": "line one\n\tindented\r\nwindows line",
    "at_the_limit_with_astral_chars": "𝄞" * (LIMIT // 2) + "a" * (LIMIT // 2),
}
REFUSED = {
    "empty": "",
    "whitespace_only": " \t\n ",
    "over_the_limit": "b" * (LIMIT + 1),
    "over_the_limit_astral": "😀" * (LIMIT + 1),
    "nul": "before\x00after",
    "escape_sequence": "clear \x1b[2J screen",
    "bell": "ring\x07",
    "delete": "rub\x7fout",
}


@pytest.mark.parametrize("text", ROUND_TRIP.values(), ids=ROUND_TRIP.keys())
async def test_edge_case_text_round_trips_exactly_over_rest_and_mcp(live_server: LiveServer, text: str) -> None:
    url = live_server.url
    async with httpx.AsyncClient(timeout=30) as http:
        created = await http.post(f"{url}/api/lancedb/memories", json={"text": text, "category": "unicode"})
        assert created.status_code == 200, created.text
        fetched = await http.get(f"{url}/api/lancedb/memories/{created.json()['id']}")
        assert fetched.json()["text"] == text
        listed = await http.get(f"{url}/api/lancedb/memories", params={"category": "unicode"})
        assert [m["text"] for m in listed.json()] == [text]
    async with streamable_session(url) as mcp:
        stored = await mcp.call_tool("remember", {"content": text, "tags": ["unicode-mcp"]})
        assert stored.is_error is False, stored
        memory_id = stored.structured_content["memory_id"]  # type: ignore[index]
        facts = await mcp.call_tool("list_facts", {"tag": "unicode-mcp"})
        assert [m["content"] for m in facts.structured_content["memories"]] == [text]  # type: ignore[index]
        recalled = await mcp.call_tool("recall", {"query": text[:LIMIT], "top_k": 2})
        assert recalled.structured_content["memories"][0]["memory_id"] in {  # type: ignore[index]
            memory_id, created.json()["id"]}
        assert {m["content"] for m in recalled.structured_content["memories"]} == {text}  # type: ignore[index]


@pytest.mark.parametrize("text", REFUSED.values(), ids=REFUSED.keys())
async def test_empty_over_long_and_control_text_is_refused_the_same_way_on_rest_and_mcp(
        live_server: LiveServer, text: str) -> None:
    url = live_server.url
    async with httpx.AsyncClient(timeout=30) as http:
        refused = await http.post(f"{url}/api/lancedb/memories", json={"text": text})
        assert refused.status_code == 422, refused.text
        assert set(refused.json()) == {"detail", "code"} and refused.json()["detail"]
        if len(text) > LIMIT:
            assert refused.json()["code"] == "text_too_long" and str(LIMIT) in refused.json()["detail"]
        async with streamable_session(url) as mcp:
            tool = await mcp.call_tool("remember", {"content": text})
            assert tool.is_error is True
            assert "internal_error" not in tool.content[0].text  # type: ignore[union-attr]
        stats = await http.get(f"{url}/api/lancedb/stats")
        assert stats.json()["total"] == 0
