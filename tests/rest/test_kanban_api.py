"""Kanban REST routes over a real uvicorn: shapes, status codes, claims, jobs that never block."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from app.kanban.models import STATUSES
from app.settings import Settings
from tests.kanban.support import live_group_members, read_probe, wait_for_probe, wait_gone, write_job_script
from tests.support.server import LiveServer, run_server, spawn_server

SettingsFactory = Callable[..., Settings]


@pytest.fixture
def script(tmp_path: Path) -> Path:
    return write_job_script(tmp_path / "jobs").resolve()


@pytest.fixture
def settings(make_settings: SettingsFactory, script: Path, kanban_db: Path | str) -> Settings:
    return make_settings(kanban_db=kanban_db, jobs_allow_root=True, job_command=[str(script)], job_timeout_s=60,
                         job_kill_grace_s=1)


@pytest.fixture
def client(live_server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"{live_server.url}/api/kanban", timeout=30) as http:
        yield http


def test_board_has_all_eight_columns_in_order(client: httpx.Client) -> None:
    client.post("/tasks", json={"title": "First", "assignee": "claude-code"})
    body = client.get("/board").json()
    assert [column["status"] for column in body["columns"]] == list(STATUSES)
    card = body["columns"][1]["cards"][0]
    assert (card["id"], card["title"], card["assignee"]) == ("TASK-00001", "First", "claude-code")
    assert isinstance(card["updated_ms"], int)


def test_task_lifecycle_over_http(client: httpx.Client) -> None:
    created = client.post("/tasks", json={"title": "Ship it", "assignee": "openclaw", "description": "# Plan",
                                          "steps": ["openclaw", "claude-code"], "actor": "lead"})
    assert created.status_code == 201
    task_id = created.json()["id"]
    assert created.json()["status"] == "todo" and created.json()["current_step"] == 1
    patched = client.patch(f"/tasks/{task_id}", json={"priority": "high", "current_step": 2})
    assert patched.status_code == 200 and patched.json()["priority"] == "high"
    moved = client.post(f"/tasks/{task_id}-Ship-it/move", json={"to_status": "review", "actor": "reviewer"})
    assert moved.status_code == 200 and moved.json()["status"] == "review"
    note = client.post(f"/tasks/{task_id}/notes", json={"text": "looks good", "author": "claude-code"})
    assert note.status_code == 201
    detail = client.get(f"/tasks/{task_id}").json()
    assert [(h["from_status"], h["to_status"], h["actor"]) for h in detail["history"]] == [
        (None, "todo", "lead"), ("todo", "review", "reviewer")]
    assert [(n["author"], n["text"]) for n in detail["notes"]] == [("claude-code", "looks good")]
    assert detail["jobs"] == [] and detail["current_step"] == 2
    assert [t["id"] for t in client.get("/tasks", params={"status": "review"}).json()] == [task_id]
    assert client.get("/tasks", params={"assignee": "nobody"}).json() == []


def test_errors_have_detail_and_code(client: httpx.Client) -> None:
    missing = client.get("/tasks/TASK-00077")
    assert (missing.status_code, missing.json()["code"]) == (404, "task_not_found")
    client.post("/tasks", json={"title": "x", "assignee": "a"})
    bad_status = client.post("/tasks/TASK-00001/move", json={"to_status": "doing"})
    assert bad_status.status_code == 422 and "backlog" in bad_status.json()["detail"]
    assert client.get("/tasks/..%2F..%2Fetc").status_code in (404, 422)
    assert client.get("/tasks", params={"status": "nope"}).json()["code"] == "invalid_status"
    assert client.post("/tasks", json={"title": "a ]] b", "assignee": "a"}).status_code == 422
    assert client.post("/tasks", json={"assignee": "a"}).json()["code"] == "invalid_input"
    assert client.get("/jobs/job-unknown").json()["code"] == "job_not_found"


def test_delete_task_over_http_answers_with_the_task_then_it_is_gone(client: httpx.Client) -> None:
    task_id = client.post("/tasks", json={"title": "Drop me", "assignee": "a"}).json()["id"]
    deleted = client.delete(f"/tasks/{task_id}")
    assert deleted.status_code == 200 and deleted.json()["title"] == "Drop me"
    assert client.get(f"/tasks/{task_id}").json()["code"] == "task_not_found"
    again = client.delete(f"/tasks/{task_id}")
    assert (again.status_code, again.json()["code"]) == (404, "task_not_found")
    assert client.delete("/tasks/not-a-task").json()["code"] == "invalid_task_id"


async def test_claim_race_over_http_has_one_winner(live_server: LiveServer) -> None:
    async with httpx.AsyncClient(base_url=f"{live_server.url}/api/kanban", timeout=30) as http:
        task_id = (await http.post("/tasks", json={"title": "Claim", "assignee": "a"})).json()["id"]
        claim = {"to_status": "running", "expected_status": "todo"}
        responses = await asyncio.gather(*(http.post(f"/tasks/{task_id}/move", json=claim) for _ in range(5)))
    codes = sorted(r.status_code for r in responses)
    assert codes == [200, 409, 409, 409, 409]
    assert {r.json()["code"] for r in responses if r.status_code == 409} == {"status_conflict"}


def test_job_routes_return_202_while_running_and_200_when_done(client: httpx.Client, script: Path) -> None:
    task_id = client.post("/tasks", json={"title": "Job", "assignee": "a"}).json()["id"]
    done = client.post("/jobs", json={"task_id": task_id, "args": ["; rm -rf ~"], "wait_s": 20})
    assert done.status_code == 200 and done.json()["status"] == "succeeded"
    job_id = done.json()["id"]
    assert read_probe(script, job_id)["argv"][1:] == ["--", task_id, "; rm -rf ~"]
    assert client.get(f"/jobs/{job_id}").json()["stdout"] == "hello from the job\n"
    assert [j["id"] for j in client.get("/jobs", params={"task_id": task_id}).json()] == [job_id]
    assert client.get(f"/tasks/{task_id}").json()["jobs"][0]["id"] == job_id
    assert client.post("/jobs", json={"wait_s": 61}).status_code == 422
    assert client.post("/jobs", json={"command": ["/bin/sh"]}).status_code == 422  # no way to pick what runs
    running = client.post("/jobs", json={"args": ["slow"]})
    assert running.status_code == 202 and running.json()["status"] == "running"
    again = client.post("/jobs", json={"args": ["slow"]})
    assert again.json()["already_running"] is True and again.json()["id"] == running.json()["id"]


@pytest.mark.slow
def test_board_and_recall_answer_while_a_30_second_job_runs(settings: Settings) -> None:
    with run_server(settings) as server, httpx.Client(base_url=f"{server.url}/api/kanban", timeout=10) as http:
        memories = f"{server.url}/api/lancedb"
        assert http.post(f"{memories}/memories", json={"text": "the nightly job rebuilds the index"}).is_success
        job = http.post("/jobs", json={"args": ["slow"]})
        assert job.status_code == 202  # answered while the job runs: nobody waits for it
        for _ in range(25):
            assert http.get("/board").status_code == 200
            found = http.get(f"{memories}/vector-search", params={"q": "nightly job index"})
            assert found.status_code == 200 and found.json()[0]["text"] == "the nightly job rebuilds the index"
        # Every answer came while the job still ran (its latency is bench/speed's business, not a test's).
        assert http.get(f"/jobs/{job.json()['id']}").json()["status"] == "running"
    assert wait_gone(job.json()["pid"]) == []  # shutting the server down killed the job


@pytest.mark.slow
def test_a_job_left_by_a_killed_server_is_killed_and_marked_at_the_next_start(
    settings: Settings, script: Path, tmp_path: Path
) -> None:
    env = {
        "MEMORY_MCP_DB_PATH": str(settings.db_path),
        "MEMORY_MCP_KANBAN_DB": str(settings.kanban_db_url or settings.kanban_db_path),
        "MEMORY_MCP_EMBEDDING_PROVIDER": "hash", "MEMORY_MCP_LOG_FORMAT": "text",
        "MEMORY_MCP_JOB_COMMAND": str(script), "MEMORY_MCP_JOBS_ALLOW_ROOT": "true",
    }
    with spawn_server(env, log_path=tmp_path / "first.log") as first:
        # "hang": the job starts a grandchild that ignores SIGTERM, so something of it outlives the server.
        job = httpx.post(f"{first.url}/api/kanban/jobs", json={"args": ["hang"]}, timeout=30).json()
        wait_for_probe(script, job["id"])
        first.process.kill()  # kill -9: no shutdown hook runs
        first.process.wait(10)
    try:
        assert live_group_members(job["pid"]), "part of the job outlived its server, as a real crash leaves it"
        with spawn_server(env, log_path=tmp_path / "second.log") as second:
            record = httpx.get(f"{second.url}/api/kanban/jobs/{job['id']}", timeout=30).json()
        assert record["status"] == "abandoned" and "killed" in record["reason"]
        assert wait_gone(job["pid"]) == []
    finally:
        for proc in live_group_members(job["pid"]):
            proc.kill()
