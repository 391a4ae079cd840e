"""Superseding over REST against a real uvicorn (hash embedder, LanceDB in tmp_path)."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import SettingsFactory
from tests.rest.support import API, create_memory
from tests.support.server import run_server

OLD = "timestamps must be milliseconds in every API payload"
NEW = "timestamps are now seconds in every API payload"




def _links(hits: list[dict[str, object]]) -> dict[object, tuple[object, object]]:
    return {hit["id"]: (hit["supersedes"], hit["superseded_by"]) for hit in hits}


def test_a_superseded_memory_is_hidden_from_both_searches_until_asked_for(client: httpx.Client) -> None:
    old = create_memory(client, OLD)
    new = create_memory(client, NEW, supersedes=old)
    current = {new: (old, None)}
    everything = {new: (old, None), old: (None, new)}
    for path, query in (("/vector-search", "timestamps API payload"), ("/search", "timestamps")):
        assert _links(client.get(path, params={"q": query}).json()) == current, path
        shown = client.get(path, params={"q": query, "include_superseded": "true"}).json()
        assert _links(shown) == everything, path
    assert _links(client.get("/memories").json()) == everything
    assert client.get(f"/memories/{old}").json()["superseded_by"] == new
    retired = {hit["id"]: hit["invalidated_at"] for hit in client.get(
        "/search", params={"q": "timestamps", "include_superseded": "true"}).json()}
    assert retired[new] is None and retired[old] == client.get(f"/memories/{old}").json()["invalidated_at"] > 0
    assert client.get("/stats").json()["total"] == 2


@pytest.mark.parametrize(("supersedes", "status", "code"), [
    ("nosuchid", 404, "memory_not_found"),
    ("not an id!", 422, "invalid_id"),
])
def test_superseding_what_does_not_exist_is_refused_and_stores_nothing(
        client: httpx.Client, supersedes: str, status: int, code: str) -> None:
    response = client.post("/memories", json={"text": NEW, "supersedes": supersedes})
    assert response.status_code == status and response.json()["code"] == code
    assert client.get("/stats").json()["total"] == 0


def test_superseding_an_already_superseded_memory_is_409_naming_the_newer_one(client: httpx.Client) -> None:
    old = create_memory(client, OLD)
    new = create_memory(client, NEW, supersedes=old)
    again = client.post("/memories", json={"text": "timestamps are microseconds", "supersedes": old})
    assert again.status_code == 409 and again.json()["code"] == "already_superseded"
    assert new in again.json()["detail"]
    assert client.get("/stats").json()["total"] == 2


def test_a_near_duplicate_that_says_something_else_comes_with_a_hint(client: httpx.Client) -> None:
    text = "the release checklist: run the migrations, tag the build, announce it and watch errors for an hour"
    first = create_memory(client, text)
    body = client.post("/memories", json={"text": text.replace("an hour", "two hours")}).json()
    assert body["duplicate"]["memory_id"] == first
    assert body["duplicate"]["hint"] == f"if this replaces {first}, remember with supersedes={first}"


def test_an_agent_token_supersedes_only_memories_it_may_write(make_settings: SettingsFactory) -> None:
    settings = make_settings(token="main-token-0123456", agent_tokens={"alpha-token-0123456": "alpha"})
    with run_server(settings) as server, httpx.Client(base_url=server.url + API, timeout=30) as client:
        alpha = {"Authorization": "Bearer alpha-token-0123456"}
        main = {"Authorization": "Bearer main-token-0123456"}
        theirs = client.post("/memories", json={"text": OLD, "scope": "agent:beta"}, headers=main).json()["id"]
        denied = client.post("/memories", json={"text": NEW, "scope": "agent:alpha", "supersedes": theirs},
                             headers=alpha)
        assert denied.status_code == 403 and denied.json()["code"] == "scope_forbidden"
        assert client.get("/stats", headers=main).json()["total"] == 1
        assert client.get(f"/memories/{theirs}", headers=main).json()["superseded_by"] is None
        mine = client.post("/memories", json={"text": OLD, "scope": "agent:alpha"}, headers=alpha).json()["id"]
        replaced = client.post("/memories", json={"text": NEW, "scope": "agent:alpha", "supersedes": mine},
                               headers=alpha)
        assert replaced.status_code == 200
        assert client.get(f"/memories/{mine}", headers=alpha).json()["superseded_by"] == replaced.json()["id"]
