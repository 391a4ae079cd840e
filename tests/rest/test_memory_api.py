"""The /api/lancedb routes over a real uvicorn (hash embedder, LanceDB in tmp_path)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.memory.embeddings.registry import available
from tests.conftest import SettingsFactory
from tests.rest.support import API, create_memory
from tests.support.server import LiveServer, free_port, run_server


def test_post_then_vector_search_finds_it_first_with_the_documented_shape(client: httpx.Client) -> None:
    memory_id = create_memory(client, "the release train leaves on tuesday", scope="project:p", category="ops,release",
                        importance=0.9)
    create_memory(client, "unrelated note about cats")
    response = client.get("/vector-search", params={"q": "the release train leaves on tuesday", "limit": 5})
    assert response.status_code == 200 and response.headers["X-Search-Mode"] == "vector"
    first = response.json()[0]
    assert set(first) == {"id", "text", "scope", "category", "tags", "importance", "timestamp", "score",
                          "similarity", "duplicate_ids", "supersedes", "superseded_by", "invalidated_at"}
    assert first["id"] == memory_id and first["scope"] == "project:p" and first["invalidated_at"] is None
    assert first["category"] == "other" and first["tags"] == ["ops", "release"]  # neither names a plugin category
    assert first["importance"] == 0.9 and first["score"] == pytest.approx(1.0, abs=1e-5)
    assert first["similarity"] == pytest.approx(1.0, abs=1e-5) and first["duplicate_ids"] == []
    assert first["timestamp"] > 1_600_000_000_000  # milliseconds
    scoped = client.get("/vector-search", params={"q": "release", "scope": "global"}).json()
    assert memory_id not in {hit["id"] for hit in scoped}


def test_a_duplicate_post_reports_the_match(client: httpx.Client) -> None:
    first = create_memory(client, "same words twice")
    body = client.post("/memories", json={"text": "same words twice"}).json()
    assert body["id"] != first and body["duplicate"]["memory_id"] == first


def test_keyword_search_finds_a_chinese_substring(client: httpx.Client) -> None:
    memory_id = create_memory(client, "memory-mcp timestamp 必須用毫秒，與 OpenClaw 格式一致")
    hits = client.get("/search", params={"q": "毫秒"}).json()
    assert [hit["id"] for hit in hits] == [memory_id]


def test_list_is_newest_first_and_paginated(client: httpx.Client) -> None:
    ids = [create_memory(client, f"note {i}", category="page") for i in range(5)]
    page1 = client.get("/memories", params={"limit": 2, "category": "page"}).json()
    page2 = client.get("/memories", params={"limit": 2, "offset": 2, "category": "page"}).json()
    page3 = client.get("/memories", params={"limit": 2, "offset": 4, "category": "page"}).json()
    assert [m["id"] for m in page1 + page2 + page3] == list(reversed(ids))


def test_get_patch_and_delete_a_memory(client: httpx.Client) -> None:
    memory_id = create_memory(client, "patch me", category="a")
    assert client.get(f"/memories/{memory_id}").json()["text"] == "patch me"
    patched = client.patch(f"/memories/{memory_id}", json={"scope": "agent:claude-code", "category": "b,c",
                                                           "importance": 0.1})
    assert patched.status_code == 200
    body = patched.json()
    assert body["scope"] == "agent:claude-code" and body["tags"] == ["b", "c"] and body["importance"] == 0.1
    assert client.patch(f"/memories/{memory_id}", json={"text": "patched text"}).json()["text"] == "patched text"
    assert client.delete(f"/memories/{memory_id}").json() == {"ok": True}
    missing = client.get(f"/memories/{memory_id}")
    assert missing.status_code == 404 and missing.json()["code"] == "memory_not_found"


def test_unknown_ids_are_404_with_a_code(client: httpx.Client) -> None:
    for response in (client.delete("/memories/deadbeef"), client.get("/memories/deadbeef"),
                     client.patch("/memories/deadbeef", json={"importance": 0.5})):
        assert response.status_code == 404
        assert set(response.json()) == {"detail", "code"} and response.json()["code"] == "memory_not_found"


@pytest.mark.parametrize(("method", "path", "kwargs", "code"), [
    ("post", "/memories", {"json": {"text": ""}}, "invalid_input"),
    ("post", "/memories", {"json": {"text": "   "}}, "invalid_text"),
    ("post", "/memories", {"json": {"text": "nul \u0000"}}, "invalid_text"),
    ("post", "/memories", {"json": {"text": "x", "scope": "team:x"}}, "invalid_scope"),
    ("post", "/memories", {"json": {"text": "x", "scope": "myproject"}}, "invalid_scope"),
    ("get", "/vector-search", {"params": {"q": "x", "scope": "myproject"}}, "invalid_scope"),
    ("post", "/memories", {"json": {"text": "x", "importance": 1.5}}, "invalid_input"),
    ("post", "/memories", {"json": {"text": "x", "unknown": 1}}, "invalid_input"),
    ("post", "/memories", {"json": {"text": "x", "category": "a," + "y" * 80}}, "invalid_tags"),
    ("post", "/memories", {"content": b'{"text": "\\ud800"}', "headers": {"content-type": "application/json"}},
     "invalid_input"),  # a lone surrogate: refused by the JSON parser already
    ("get", "/vector-search", {"params": {"q": "x", "limit": 0}}, "invalid_input"),
    ("get", "/vector-search", {"params": {"q": "x", "limit": 101}}, "invalid_input"),
    ("get", "/vector-search", {"params": {"q": ""}}, "invalid_input"),
    ("get", "/memories", {"params": {"offset": -1}}, "invalid_input"),
    ("get", "/memories", {"params": {"scope": "x' OR '1'='1"}}, "invalid_scope"),
    ("delete", "/memories/x' OR '1'='1", {}, "invalid_id"),
])
def test_bad_input_is_422_with_detail_and_code(client: httpx.Client, method: str, path: str,
                                               kwargs: dict[str, object], code: str) -> None:
    create_memory(client, "a row that must survive")
    response = client.request(method.upper(), path, **kwargs)  # type: ignore[arg-type]
    assert response.status_code == 422, response.text
    assert response.json()["code"] == code and response.json()["detail"]
    assert client.get("/stats").json()["total"] == 1


def test_text_over_the_limit_is_refused(client: httpx.Client) -> None:
    response = client.post("/memories", json={"text": "x" * 8001})
    assert response.status_code == 422 and "8000" in response.json()["detail"]


def test_stats_count_scopes_and_tags(client: httpx.Client) -> None:
    create_memory(client, "one", category="a,decision", scope="agent:x")
    create_memory(client, "two", category="a")
    stats = client.get("/stats").json()
    assert stats["total"] == 2 and stats["scopes"] == {"agent:x": 1, "global": 1}
    assert stats["categories"] == {"decision": 1, "other": 1} and stats["embedding"]["provider"] == "hash"


def test_stats_dimension_is_the_vector_length_as_a_number(client: httpx.Client) -> None:
    embedding = client.get("/stats").json()["embedding"]
    assert embedding == {"provider": "hash", "model": "hash-bow-v1", "dimension": 256}
    assert isinstance(embedding["dimension"], int)  # was the string "256"


def test_each_category_count_is_what_that_category_filter_lists(client: httpx.Client) -> None:
    # The documented meaning: memories per memory-lancedb-pro category; other words are tags.
    for text, category in (("one", "deploy,decision"), ("two", "preference"), ("three", "ci,docs,deploy"),
                           ("four", None)):
        create_memory(client, text, category=category)
    categories = client.get("/stats").json()["categories"]
    assert categories == {"decision": 1, "preference": 1, "other": 2}
    for name, count in categories.items():
        listed = client.get("/memories", params={"category": name}).json()
        assert len(listed) == count and {m["category"] for m in listed} == {name}, name
    assert {m["text"] for m in client.get("/memories", params={"category": "deploy"}).json()} == {"one", "three"}


@pytest.fixture
def dead_embedder_server(make_settings: SettingsFactory, tmp_path: Path) -> Iterator[LiveServer]:
    """An OpenAI-compatible provider pointed at a closed port: every embedding fails."""
    assert "openai" in available()
    settings = make_settings(embedding_provider="openai", embedding_base_url=f"http://127.0.0.1:{free_port()}/v1",
                             embedding_model="fake", embedding_dimensions=16, embedding_max_retries=0,
                             embedding_timeout_s=2, embedding_api_key="unused")
    with run_server(settings) as server:
        yield server


def test_embedder_down_gives_503_on_post_and_keyword_fallback_on_search(dead_embedder_server: LiveServer) -> None:
    with httpx.Client(base_url=dead_embedder_server.url + API, timeout=30) as client:
        response = client.post("/memories", json={"text": "cannot embed"})
        assert response.status_code == 503 and response.json()["code"] == "embedding_unavailable"
        assert "Retry-After" in response.headers
        assert client.get("/stats").json()["total"] == 0
        search = client.get("/vector-search", params={"q": "anything"})
        assert search.status_code == 200 and search.headers["X-Search-Mode"] == "keyword_fallback"
        assert search.json() == []


def test_an_agent_token_writes_only_its_own_scope(make_settings: SettingsFactory) -> None:
    settings = make_settings(token="main-token-0123456", agent_tokens={"alpha-token-0123456": "alpha"})
    with run_server(settings) as server, httpx.Client(base_url=server.url + API, timeout=30) as client:
        alpha = {"Authorization": "Bearer alpha-token-0123456"}
        main = {"Authorization": "Bearer main-token-0123456"}
        other = client.post("/memories", json={"text": "beta's", "scope": "agent:beta"}, headers=main).json()["id"]
        assert client.post("/memories", json={"text": "mine", "scope": "agent:alpha"}, headers=alpha).status_code == 200
        denied = client.post("/memories", json={"text": "x", "scope": "agent:beta"}, headers=alpha)
        assert denied.status_code == 403 and denied.json()["code"] == "scope_forbidden"
        assert client.delete(f"/memories/{other}", headers=alpha).status_code == 403
        assert client.get("/stats", headers=main).json()["total"] == 2


LOCAL_TARGET = "memory-mcp timestamp 必須用毫秒，與 OpenClaw 格式一致"
LOCAL_DISTRACTORS = [
    "The kanban board has eight columns",
    "部署腳本放在 scripts 目錄",
    "Use uv to install Python packages",
    "記得每天備份資料庫",
]


@pytest.mark.slow
def test_the_local_model_finds_a_chinese_memory_by_mixed_and_english_queries(make_settings: SettingsFactory) -> None:
    """The issue's done-when check with the real default model (USE multilingual, 512-d)."""
    with run_server(make_settings(embedding_provider="local"), startup_timeout=120) as server, httpx.Client(
            base_url=server.url + API, timeout=60) as client:
        for text in LOCAL_DISTRACTORS:
            assert client.post("/memories", json={"text": text}).status_code == 200
        target = client.post("/memories", json={"text": LOCAL_TARGET}).json()["id"]
        for query in ("timestamp 毫秒", "timestamps must be in milliseconds"):
            hits = client.get("/vector-search", params={"q": query, "limit": 3}).json()
            assert hits[0]["id"] == target, (query, hits)
            assert 0.0 < hits[0]["similarity"] <= 1.0 and hits[0]["score"] >= hits[0]["similarity"]
        assert client.get("/stats").json()["embedding"]["model"] == "use-multilingual-v3"
