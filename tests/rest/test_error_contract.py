"""Whatever a client sends, the answer is a 4xx with ``{detail, code}``: bounds, types, bodies, methods."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.kanban.models import MAX_RETRY_COUNT
from app.memory.validation import MAX_OFFSET
from app.rest.schema import MAX_QUERY_CHARS
from app.settings import Settings
from tests.conftest import SettingsFactory
from tests.support.server import LiveServer

INT64_MAX = 2**63 - 1


@pytest.fixture
def settings(make_settings: SettingsFactory, tmp_path: Path) -> Settings:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")
    script.chmod(0o700)
    return make_settings(jobs_allow_root=True, job_command=[str(script)])


@pytest.fixture
def client(live_server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live_server.url, timeout=30) as http:
        yield http


def refused(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.json()["code"] == code and response.json()["detail"], response.text


def test_a_retry_count_past_sqlite_int64_is_422_and_the_task_is_unchanged(client: httpx.Client) -> None:
    task_id = client.post("/api/kanban/tasks", json={"title": "Retry", "assignee": "a"}).json()["id"]
    for value in (INT64_MAX + 1, INT64_MAX, MAX_RETRY_COUNT + 1, -1, 10**400):
        refused(client.patch(f"/api/kanban/tasks/{task_id}", json={"retry_count": value}), 422, "invalid_input")
    assert client.get(f"/api/kanban/tasks/{task_id}").json()["retry_count"] == 0
    accepted = client.patch(f"/api/kanban/tasks/{task_id}", json={"retry_count": MAX_RETRY_COUNT})
    assert accepted.status_code == 200 and accepted.json()["retry_count"] == MAX_RETRY_COUNT


def test_a_step_the_task_does_not_have_is_409_and_a_step_past_four_is_422(client: httpx.Client) -> None:
    relay = {"title": "Relay", "assignee": "a", "steps": ["a", "b"]}
    task_id = client.post("/api/kanban/tasks", json=relay).json()["id"]
    refused(client.patch(f"/api/kanban/tasks/{task_id}", json={"current_step": 3}), 409, "step_out_of_range")
    refused(client.patch(f"/api/kanban/tasks/{task_id}", json={"current_step": 5}), 422, "invalid_input")
    moved = client.patch(f"/api/kanban/tasks/{task_id}", json={"current_step": 2.0})  # a JSON integer too
    assert moved.status_code == 200 and moved.json()["current_step"] == 2


def test_a_boolean_or_a_string_is_not_a_number_and_no_job_starts(client: httpx.Client) -> None:
    task_id = client.post("/api/kanban/tasks", json={"title": "Types", "assignee": "a"}).json()["id"]
    refused(client.patch(f"/api/kanban/tasks/{task_id}", json={"retry_count": True}), 422, "invalid_input")
    refused(client.patch(f"/api/kanban/tasks/{task_id}", json={"retry_count": "3"}), 422, "invalid_input")
    refused(client.post("/api/kanban/jobs", json={"wait_s": False}), 422, "invalid_input")
    refused(client.post("/api/lancedb/memories", json={"text": "x", "importance": True}), 422, "invalid_input")
    assert client.get("/api/kanban/jobs").json() == []
    assert client.get("/api/lancedb/stats").json()["total"] == 0


@pytest.mark.parametrize("params", [
    {"offset": MAX_OFFSET + 1}, {"offset": 10**30}, {"limit": 10**30}, {"limit": -(10**30)},
])
def test_paging_past_its_bounds_is_422(client: httpx.Client, params: dict[str, int]) -> None:
    refused(client.get("/api/lancedb/memories", params=params), 422, "invalid_input")


def test_jobs_list_limit_is_bounded(client: httpx.Client) -> None:
    refused(client.get("/api/kanban/jobs", params={"limit": 501}), 422, "invalid_input")
    assert client.get("/api/kanban/jobs", params={"limit": 500}).status_code == 200


def test_a_search_query_longer_than_fits_a_url_is_refused_by_its_documented_limit(client: httpx.Client) -> None:
    refused(client.get("/api/lancedb/search", params={"q": "語" * (MAX_QUERY_CHARS + 1)}), 422, "invalid_input")
    assert client.get("/api/lancedb/search", params={"q": "\U000413a0" * MAX_QUERY_CHARS}).status_code == 200


def test_a_body_that_is_not_utf8_json_is_400_malformed_body(client: httpx.Client) -> None:
    headers = {"Content-Type": "application/json"}
    refused(client.post("/api/kanban/tasks", content=b"\xff\xfe{", headers=headers), 400, "malformed_body")
    refused(client.post("/api/kanban/tasks", content=b"{not json", headers=headers), 422, "invalid_input")


def test_a_method_a_path_does_not_serve_is_405_naming_every_method_it_does(client: httpx.Client) -> None:
    response = client.request("PUT", "/api/kanban/jobs")
    refused(response, 405, "method_not_allowed")
    assert {"GET", "POST"} <= {method.strip() for method in response.headers["Allow"].split(",")}
    task = client.request("PUT", "/api/kanban/tasks/TASK-00001")
    assert {"GET", "PATCH", "DELETE"} <= {method.strip() for method in task.headers["Allow"].split(",")}


def test_an_unknown_route_is_404_with_a_code(client: httpx.Client) -> None:
    refused(client.get("/api/kanban/nothing-here"), 404, "not_found")
