"""The dashboard's memory panel in a real browser against a real server (hash embedder)."""

from __future__ import annotations

import re
from datetime import datetime
from zoneinfo import ZoneInfo

import httpx
import pytest
from playwright.sync_api import Locator, Page, Route, expect

from tests.conftest import SettingsFactory
from tests.web.conftest import TIMEZONE, BrowserPage, dashboard_server

FACT = "memory-mcp timestamp 必須用毫秒，與 OpenClaw 格式一致"
OTHER = "The kanban board keeps its SQLite file in WAL mode"


def memory_item(page: Page, text: str) -> Locator:
    return page.locator("#memory-list .memory", has_text=text)


def add_through_form(page: Page, text: str, scope: str, tags: str, importance: str = "0.7") -> None:
    if not page.locator("#add-panel").evaluate("el => el.open"):
        page.get_by_text("Add a memory").click()
    page.locator("#add-text").fill(text)
    page.locator("#add-scope").fill(scope)
    page.locator("#add-tags").fill(tags)
    page.locator("#add-importance").fill(importance)
    page.get_by_role("button", name="Add memory").click()


def search(page: Page, query: str, button: str) -> None:
    page.locator("#search-input").fill(query)
    page.get_by_role("button", name=button).click()


@pytest.mark.slow
def test_memory_panel_adds_finds_edits_and_deletes_a_memory(
    make_settings: SettingsFactory, browser_page: BrowserPage
) -> None:
    page = browser_page.page
    with dashboard_server(make_settings(), browser_page) as server:
        page.goto(f"{server.url}/#memories")
        add_through_form(page, OTHER, "global", "kanban")
        expect(memory_item(page, OTHER)).to_be_visible()
        add_through_form(page, FACT, "agent:claude-code", "decision, format", "0.9")
        fact = memory_item(page, FACT)
        expect(fact).to_be_visible()
        expect(fact.locator(".tag")).to_have_text(["decision", "format"])
        expect(fact).to_contain_text("★ 0.90")
        expect(fact).to_contain_text("by claude-code")
        expect(page.locator(".scope[data-scope='agent:claude-code'] .count")).to_have_text("1")
        expect(page.locator(".scope[data-scope=''] .count")).to_have_text("2")
        browser_page.screenshot("dashboard-memories")

        search(page, "OpenClaw timestamp format", "Semantic search")
        expect(page.locator("#list-summary")).to_contain_text("semantic result")
        expect(page.locator("#memory-list .memory").first).to_contain_text(FACT)
        expect(page.locator("#memory-list .memory").first.locator(".score")).to_have_text(
            re.compile(r"^score (0\.\d{3}|1\.000) · similarity -?[01]\.\d{3}$"))  # score in 0..1, cosine beside
        browser_page.screenshot("dashboard-semantic-search")

        search(page, "毫秒", "Keyword search")
        expect(page.locator("#list-summary")).to_have_text("1 keyword result for “毫秒”")
        expect(page.locator("#memory-list .memory")).to_have_count(1)
        expect(memory_item(page, FACT)).to_be_visible()

        memory_item(page, FACT).get_by_role("button", name="Edit").click()
        editor = page.locator("#memory-list form.editing")
        editor.get_by_label("Memory text").fill(FACT + "（已確認）")
        editor.get_by_label("Tags").fill("decision, format, confirmed")
        editor.get_by_role("button", name="Save").click()
        edited = memory_item(page, "（已確認）")
        expect(edited).to_be_visible()
        expect(edited.locator(".tag")).to_have_text(["decision", "format", "confirmed"])
        memory_id = edited.get_attribute("data-id")
        stored = httpx.get(f"{server.url}/api/lancedb/memories/{memory_id}").json()
        assert stored["text"] == FACT + "（已確認）"
        assert stored["category"] == "decision" and stored["tags"] == ["decision", "format", "confirmed"]

        dialogs: list[str] = []
        page.once("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.accept()))
        edited.get_by_role("button", name="Delete").click()
        expect(memory_item(page, "（已確認）")).to_have_count(0)
        assert dialogs and memory_id in dialogs[0]
        assert httpx.get(f"{server.url}/api/lancedb/memories/{memory_id}").status_code == 404
        expect(page.locator(".scope[data-scope=''] .count")).to_have_text("1")
    assert browser_page.problems.messages == []


def test_dismissing_the_delete_confirmation_keeps_the_memory(
    make_settings: SettingsFactory, browser_page: BrowserPage
) -> None:
    page = browser_page.page
    with dashboard_server(make_settings(), browser_page) as server:
        created = httpx.post(f"{server.url}/api/lancedb/memories", json={"text": FACT}).json()
        page.goto(f"{server.url}/#memories")
        page.once("dialog", lambda dialog: dialog.dismiss())
        memory_item(page, FACT).get_by_role("button", name="Delete").click()
        expect(page.locator("#notice")).to_be_hidden()
        assert httpx.get(f"{server.url}/api/lancedb/memories/{created['id']}").status_code == 200
        expect(memory_item(page, FACT)).to_be_visible()


def test_adding_a_near_duplicate_shows_a_warning_and_still_saves(
    make_settings: SettingsFactory, browser_page: BrowserPage
) -> None:
    page = browser_page.page
    with dashboard_server(make_settings(), browser_page) as server:
        first = httpx.post(f"{server.url}/api/lancedb/memories", json={"text": FACT, "scope": "global"}).json()
        page.goto(f"{server.url}/#memories")
        expect(memory_item(page, FACT)).to_have_count(1)
        add_through_form(page, FACT, "global", "")
        warning = page.locator("#duplicate-warning")
        expect(warning).to_be_visible()
        expect(warning).to_contain_text("Possible duplicate")
        expect(warning).to_contain_text(first["id"])
        expect(memory_item(page, FACT)).to_have_count(2)
        browser_page.screenshot("dashboard-duplicate-warning")


def test_sidebar_groups_scopes_with_counts_and_filters_newest_first_in_local_time(
    make_settings: SettingsFactory, browser_page: BrowserPage
) -> None:
    page = browser_page.page
    with dashboard_server(make_settings(), browser_page) as server:
        for text, scope in [
            ("global one", "global"),
            ("antigravity note", "agent:antigravity"),
            ("claude first", "agent:claude-code"),
            ("claude second", "agent:claude-code"),
            ("project rule", "project:memory-mcp"),
        ]:
            assert httpx.post(f"{server.url}/api/lancedb/memories", json={"text": text, "scope": scope}).is_success
        page.goto(f"{server.url}/")
        buttons = page.locator("#scope-list .scope .scope-name")
        expect(buttons).to_have_text(
            ["All scopes", "global", "agent:antigravity", "agent:claude-code", "project:memory-mcp"]
        )
        expect(page.locator("#scope-list .group")).to_have_text(["Agents", "Other"])
        expect(page.locator(".scope[data-scope='agent:claude-code'] .count")).to_have_text("2")

        page.locator(".scope[data-scope='agent:claude-code']").click()
        expect(page.locator("#list-title")).to_have_text("agent:claude-code")
        expect(page.locator("#memory-list .memory-text")).to_have_text(["claude second", "claude first"])
        expect(page.locator("#add-scope")).to_have_value("agent:claude-code")

        listed = httpx.get(f"{server.url}/api/lancedb/memories", params={"scope": "agent:claude-code"}).json()
        local = datetime.fromtimestamp(listed[0]["timestamp"] / 1000, ZoneInfo(TIMEZONE))
        expect(page.locator("#memory-list .memory time").first).to_contain_text(local.strftime("%H:%M"))
    assert browser_page.problems.messages == []


def test_a_slow_answer_for_all_scopes_never_overwrites_the_scope_clicked_meanwhile(
    make_settings: SettingsFactory, browser_page: BrowserPage
) -> None:
    page = browser_page.page
    with dashboard_server(make_settings(), browser_page) as server:
        for text, scope in [("global one", "global"), ("claude only", "agent:claude-code")]:
            assert httpx.post(f"{server.url}/api/lancedb/memories", json={"text": text, "scope": scope}).is_success
        held: list[Route] = []

        def hold_the_unscoped_list(route: Route) -> None:
            if "scope=" in route.request.url:
                route.continue_()
            else:
                held.append(route)  # the first page's list: answered only after the click below

        page.route("**/api/lancedb/memories?*", hold_the_unscoped_list)
        page.goto(f"{server.url}/")
        page.locator(".scope[data-scope='agent:claude-code']").click()
        expect(page.locator("#memory-list .memory-text")).to_have_text(["claude only"])
        assert len(held) == 1
        with page.expect_response(lambda response: response.request.url == held[0].request.url) as stale:
            held[0].continue_()
        stale.value.finished()  # its whole body is in the page...
        page.evaluate("() => new Promise((done) => setTimeout(done, 0))")  # ...and the page has run on it
        expect(page.locator("#memory-list .memory-text")).to_have_text(["claude only"])
        expect(page.locator("#list-title")).to_have_text("agent:claude-code")
    assert browser_page.problems.messages == []


def test_memory_text_is_shown_as_text_and_never_run_as_markup(
    make_settings: SettingsFactory, browser_page: BrowserPage
) -> None:
    page = browser_page.page
    hostile = '<img src=x onerror="window.__owned=1"><script>window.__owned=2</script><b>bold</b>'
    with dashboard_server(make_settings(), browser_page) as server:
        created = httpx.post(f"{server.url}/api/lancedb/memories", json={"text": hostile, "category": "<i>t</i>"})
        assert created.is_success, created.text
        page.goto(f"{server.url}/")
        item = page.locator("#memory-list .memory").first
        expect(item.locator(".memory-text")).to_have_text(hostile)
        expect(item.locator(".tag")).to_have_text("<i>t</i>")
        assert item.locator("img, script, b, i").count() == 0
        assert page.evaluate("window.__owned") is None


def test_server_errors_are_shown_to_the_user_with_their_code(
    make_settings: SettingsFactory, browser_page: BrowserPage
) -> None:
    page = browser_page.page
    with dashboard_server(make_settings(), browser_page) as server:
        page.goto(f"{server.url}/")
        add_through_form(page, "lands nowhere", "nowhere:at-all", "")
        notice = page.locator("#notice")
        expect(notice).to_be_visible()
        expect(notice).to_have_attribute("role", "alert")
        expect(notice).to_contain_text("(invalid_scope)")
        assert httpx.get(f"{server.url}/api/lancedb/stats").json()["total"] == 0
        browser_page.screenshot("dashboard-error")
