"""Creating, editing and deleting tasks from the dashboard, through the REST API, with its errors shown."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from playwright.sync_api import Locator, Page, expect

from tests.conftest import SettingsFactory
from tests.support.server import LiveServer
from tests.web.conftest import BrowserPage, dashboard_server


def task_form(page: Page) -> Locator:
    return page.locator("#task-form-dialog")


def fill_task_form(page: Page, **fields: str) -> None:
    form = task_form(page)
    for label, value in fields.items():
        form.get_by_label(label.capitalize(), exact=True).fill(value)


def open_card(page: Page, task_id: str) -> Locator:
    page.locator(f".card[data-id='{task_id}']").click()
    dialog = page.locator("#task-dialog")
    expect(dialog.locator(".card-id").first).to_have_text(task_id)
    return dialog


def stored(server: LiveServer, task_id: str) -> dict[str, Any]:
    return httpx.get(f"{server.url}/api/kanban/tasks/{task_id}").json()


def rest_error(response: httpx.Response) -> str:
    """What the page must show for a refused request: the body's detail and code, as REST gives them."""
    body = response.json()
    return f"{body['detail']} ({body['code']})"


@pytest.mark.slow
def test_a_task_is_created_edited_and_deleted_from_the_board(
    make_settings: SettingsFactory, browser_page: BrowserPage
) -> None:
    page = browser_page.page
    with dashboard_server(make_settings(), browser_page) as server:
        page.goto(f"{server.url}/#board")
        page.get_by_role("button", name="New task").click()
        expect(task_form(page)).to_be_visible()
        fill_task_form(page, title="Wire the live board", description="Stream changes.\nNo polling in the page.",
                       assignee="claude-code", priority="high", tags="web, live", steps="claude-code, antigravity")
        task_form(page).get_by_label("Column").select_option("backlog")
        page.get_by_role("button", name="Create task").click()
        expect(task_form(page)).to_be_hidden()
        card = page.locator(".column[data-status='backlog'] .card")
        expect(card).to_have_count(1)
        expect(card).to_contain_text("Wire the live board")
        task_id = card.get_attribute("data-id")
        assert task_id is not None
        created = stored(server, task_id)
        assert (created["assignee"], created["priority"], created["status"]) == ("claude-code", "high", "backlog")
        assert created["tags"] == ["web", "live"] and created["steps"] == ["claude-code", "antigravity"]
        assert created["description"] == "Stream changes.\nNo polling in the page."
        assert created["history"][0]["actor"] == "dashboard"

        dialog = open_card(page, task_id)
        dialog.get_by_role("button", name="Edit").click()
        expect(task_form(page).locator("#task-form-heading")).to_have_text(f"Edit {task_id}")
        expect(task_form(page).get_by_label("Steps")).to_have_value("claude-code, antigravity")
        fill_task_form(page, title="Wire the live board (SSE)", assignee="antigravity", priority="",
                       tags="web", steps="antigravity, claude-code, openclaw", description="Server-sent events.")
        page.get_by_role("button", name="Save changes").click()
        expect(task_form(page)).to_be_hidden()
        expect(dialog.locator("#task-title")).to_have_text("Wire the live board (SSE)")
        expect(dialog.locator(".description")).to_have_text("Server-sent events.")
        expect(page.locator(f".card[data-id='{task_id}']")).to_contain_text("antigravity")
        edited = stored(server, task_id)
        assert edited["title"] == "Wire the live board (SSE)"
        assert (edited["assignee"], edited["priority"]) == ("antigravity", None)
        assert edited["tags"] == ["web"] and edited["steps"] == ["antigravity", "claude-code", "openclaw"]
        assert edited["status"] == "backlog"  # an edit never moves the card
        browser_page.screenshot("dashboard-task-edited")

        confirmations: list[str] = []
        page.once("dialog", lambda prompt: (confirmations.append(prompt.message), prompt.accept()))
        dialog.get_by_role("button", name="Delete").click()
        expect(page.locator("#task-dialog")).to_be_hidden()
        expect(page.locator(f".card[data-id='{task_id}']")).to_have_count(0)
        assert confirmations and task_id in confirmations[0]
        assert httpx.get(f"{server.url}/api/kanban/tasks/{task_id}").status_code == 404
    assert browser_page.problems.messages == []


def test_declining_the_delete_confirmation_keeps_the_task(
    make_settings: SettingsFactory, browser_page: BrowserPage
) -> None:
    page = browser_page.page
    with dashboard_server(make_settings(), browser_page) as server:
        task_id = httpx.post(f"{server.url}/api/kanban/tasks", json={"title": "Keep me", "assignee": "a"}).json()["id"]
        page.goto(f"{server.url}/#board")
        dialog = open_card(page, task_id)
        page.once("dialog", lambda prompt: prompt.dismiss())
        dialog.get_by_role("button", name="Delete").click()
        expect(page.locator("#notice")).to_be_hidden()
        expect(dialog).to_be_visible()
        assert httpx.get(f"{server.url}/api/kanban/tasks/{task_id}").status_code == 200


def test_the_task_form_shows_the_rest_validation_error_and_keeps_what_was_typed(
    make_settings: SettingsFactory, browser_page: BrowserPage
) -> None:
    page = browser_page.page
    with dashboard_server(make_settings(), browser_page) as server:
        page.goto(f"{server.url}/#board")
        page.get_by_role("button", name="New task").click()
        fill_task_form(page, title="Fix [[wiki]] links", assignee="claude-code", steps="a, b, c, d, e")
        page.get_by_role("button", name="Create task").click()
        refused = httpx.post(f"{server.url}/api/kanban/tasks", json={
            "title": "Fix [[wiki]] links", "assignee": "claude-code", "steps": ["a", "b", "c", "d", "e"]})
        assert refused.status_code == 422
        error = task_form(page).locator("#task-form-error")
        expect(error).to_have_text(rest_error(refused))  # pydantic's check of the body: at most 4 steps
        expect(error).to_have_attribute("role", "alert")
        expect(task_form(page).get_by_label("Title", exact=True)).to_have_value("Fix [[wiki]] links")

        fill_task_form(page, steps="a, b")
        page.get_by_role("button", name="Create task").click()
        refused = httpx.post(f"{server.url}/api/kanban/tasks", json={"title": "Fix [[wiki]] links", "assignee": "x"})
        expect(error).to_have_text(rest_error(refused))  # the service's own check of the title
        expect(error).to_contain_text("(invalid_title)")
        browser_page.screenshot("dashboard-task-form-error")
        assert httpx.get(f"{server.url}/api/kanban/tasks").json() == []

        fill_task_form(page, title="Fix wiki links")
        page.get_by_role("button", name="Create task").click()
        expect(task_form(page)).to_be_hidden()
        expect(page.locator(".column[data-status='todo'] .card")).to_contain_text("Fix wiki links")


def test_an_edit_the_service_refuses_shows_its_error_and_changes_nothing(
    make_settings: SettingsFactory, browser_page: BrowserPage
) -> None:
    page = browser_page.page
    with dashboard_server(make_settings(), browser_page) as server:
        task_id = httpx.post(f"{server.url}/api/kanban/tasks", json={"title": "Steady", "assignee": "a"}).json()["id"]
        page.goto(f"{server.url}/#board")
        open_card(page, task_id).get_by_role("button", name="Edit").click()
        fill_task_form(page, steps="a, b, c, d, e")
        page.get_by_role("button", name="Save changes").click()
        refused = httpx.patch(f"{server.url}/api/kanban/tasks/{task_id}", json={"steps": ["a", "b", "c", "d", "e"]})
        assert refused.status_code == 422
        expect(task_form(page).locator("#task-form-error")).to_have_text(rest_error(refused))
        assert stored(server, task_id)["steps"] == []
        task_form(page).get_by_role("button", name="Cancel").click()
        expect(task_form(page)).to_be_hidden()
        assert stored(server, task_id)["title"] == "Steady"
