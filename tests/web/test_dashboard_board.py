"""The dashboard's kanban board in a real browser against a real server and a real SQLite file."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Locator, Page, expect

from tests.conftest import SettingsFactory
from tests.support.server import LiveServer
from tests.web.conftest import BrowserPage, dashboard_server

COLUMN_TITLES = ["Backlog", "Todo", "In Progress", "Review", "Done", "Canceled", "Waiting", "Blocked"]


def create_task(server: LiveServer, title: str, **fields: object) -> dict[str, Any]:
    response = httpx.post(f"{server.url}/api/kanban/tasks", json={"title": title, "assignee": "claude-code", **fields})
    assert response.status_code == 201, response.text
    return response.json()


def column(page: Page, status: str) -> Locator:
    return page.locator(f".column[data-status='{status}']")


def status_of(server: LiveServer, task_id: str) -> str:
    return httpx.get(f"{server.url}/api/kanban/tasks/{task_id}").json()["status"]


@pytest.mark.slow
def test_board_shows_eight_columns_and_moves_cards_by_drag_and_by_the_detail_select(
    make_settings: SettingsFactory, browser_page: BrowserPage
) -> None:
    page = browser_page.page
    with dashboard_server(make_settings(), browser_page) as server:
        task = create_task(server, "Wire the dashboard", description="Serve `/` with a strict CSP.\nNo CDN.",
                           priority="high", tags=["web"])
        create_task(server, "Write the README section", status="backlog")
        page.goto(f"{server.url}/#board")
        expect(page.locator(".column-title > span:first-child")).to_have_text(COLUMN_TITLES)
        card = column(page, "todo").locator(f".card[data-id='{task['id']}']")
        expect(card).to_contain_text("Wire the dashboard")
        expect(card).to_contain_text("claude-code")
        expect(column(page, "backlog").locator(".card")).to_have_count(1)

        card.drag_to(column(page, "running"))
        expect(column(page, "running").locator(f".card[data-id='{task['id']}']")).to_be_visible()
        expect(column(page, "todo").locator(".card")).to_have_count(0)
        assert status_of(server, task["id"]) == "running"
        browser_page.screenshot("dashboard-board")

        column(page, "running").locator(".card").click()
        dialog = page.locator("#task-dialog")
        expect(dialog).to_be_visible()
        expect(dialog.locator("#task-title")).to_have_text("Wire the dashboard")
        expect(dialog.locator(".description")).to_have_text("Serve `/` with a strict CSP.\nNo CDN.")
        expect(dialog.locator(".history li")).to_have_count(2)
        expect(dialog.locator(".history li").last).to_contain_text("Todo → In Progress")
        expect(dialog.locator(".history li").last).to_contain_text("by dashboard")

        dialog.get_by_label("Move to column").select_option("review")
        dialog.get_by_role("button", name="Move", exact=True).click()
        expect(dialog.locator(".history li")).to_have_count(3)
        expect(dialog.locator(".history li").last).to_contain_text("In Progress → Review")
        expect(column(page, "review").locator(f".card[data-id='{task['id']}']")).to_be_visible()
        assert status_of(server, task["id"]) == "review"

        dialog.get_by_label("New note").fill("Checked in Chromium; looks right.")
        dialog.get_by_role("button", name="Add note").click()
        expect(dialog.locator(".notes li")).to_have_count(1)
        expect(dialog.locator(".notes li")).to_contain_text("Checked in Chromium; looks right.")
        expect(dialog.locator(".notes li")).to_contain_text("dashboard")
        browser_page.screenshot("dashboard-task-detail")
    assert browser_page.problems.messages == []


def test_card_detail_shows_job_status_and_output(
    make_settings: SettingsFactory, browser_page: BrowserPage, tmp_path: Path
) -> None:
    script = tmp_path / "job.py"
    script.write_text("import os, sys\nprint('job for', os.environ['MEMORY_MCP_TASK_ID'], sys.argv[1:])\n")
    page = browser_page.page
    settings = make_settings(jobs_allow_root=True, job_command=[sys.executable, str(script)])
    with dashboard_server(settings, browser_page) as server:
        task = create_task(server, "Run the job")
        job = httpx.post(f"{server.url}/api/kanban/jobs", json={"task_id": task["id"], "wait_s": 30}, timeout=40).json()
        assert job["status"] == "succeeded", job
        page.goto(f"{server.url}/#board")
        column(page, "todo").locator(".card").click()
        jobs = page.locator("#jobs-section .job")
        expect(jobs).to_have_count(1)
        expect(jobs).to_contain_text("succeeded")
        expect(jobs).to_contain_text("exit 0")
        jobs.get_by_role("button", name=f"Show output of job {job['id']}").click()
        expect(jobs.locator(".job-output")).to_contain_text(f"job for {task['id']}")
        browser_page.screenshot("dashboard-job-output")
    assert browser_page.problems.messages == []


def test_moving_a_card_another_agent_moved_meanwhile_is_refused_and_the_board_catches_up(
    make_settings: SettingsFactory, browser_page: BrowserPage
) -> None:
    page = browser_page.page
    with dashboard_server(make_settings(), browser_page) as server:
        task = create_task(server, "Claimed elsewhere")
        # No live updates for this page (as while its stream is down), so its board stays stale.
        page.route("**/api/events", lambda route: route.abort())
        page.goto(f"{server.url}/#board")
        stale = column(page, "todo").locator(".card")
        expect(stale).to_have_count(1)
        claimed = httpx.post(f"{server.url}/api/kanban/tasks/{task['id']}/move",
                             json={"to_status": "running", "actor": "antigravity"})
        assert claimed.is_success, claimed.text
        stale.drag_to(column(page, "done"))
        notice = page.locator("#notice")
        expect(notice).to_have_attribute("role", "alert")
        expect(notice).to_be_visible()
        expect(column(page, "running").locator(f".card[data-id='{task['id']}']")).to_be_visible()
        expect(column(page, "done").locator(".card")).to_have_count(0)
        assert status_of(server, task["id"]) == "running"
