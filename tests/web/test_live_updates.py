"""An open page follows other agents' writes without a reload: board, memories, and a server restart."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import anyio
import httpx
import pytest
from mcp import Client
from playwright.sync_api import Page, expect

from tests.conftest import SettingsFactory
from tests.harness.history import load_events
from tests.mcp.clients import payload, streamable_session
from tests.support.server import free_port, spawn_server
from tests.web.conftest import BrowserPage, dashboard_server

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[2]
# A write must show well inside this (the stream polls every 0.25 s); a missed event would wait for
# the next reconnect or a manual refresh, far beyond it.
LIVE_BOUND_S = 3.0
RESTART_TIMEOUT_MS = 60_000  # the second server starts in a fresh process on a busy 2-core machine

# Records, in the page's clock (the machine's), when a text first shows anywhere in the document.
WATCH_FOR_TEXT = """(text) => {
  window.__appearedAt = null;
  const check = () => {
    if (window.__appearedAt === null && document.body.innerText.includes(text)) {
      window.__appearedAt = Date.now();
      observer.disconnect();
    }
  };
  const observer = new MutationObserver(check);
  observer.observe(document.body, { childList: true, subtree: true, characterData: true });
}"""


def follow_live(page: Page, url: str) -> None:
    """Open the page, wait until its stream is live, and mark the document so a reload would show."""
    page.goto(url)
    expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
    page.evaluate("window.__sameDocument = true")


def assert_not_reloaded(page: Page) -> None:
    assert page.evaluate("window.__sameDocument") is True


def seconds_until_shown(page: Page, text: str, write: Callable[[], object]) -> float:
    """Run ``write`` (another agent's), wait for ``text`` on the page, return the time in between.

    The time starts when ``write`` is called, or at the moment it returns (seconds since the epoch)
    when it knows better, as a writer process that first has to start does.
    """
    page.evaluate(WATCH_FOR_TEXT, text)
    called_at = time.time()
    started_at = write()
    page.wait_for_function("() => window.__appearedAt !== null")
    start = started_at if isinstance(started_at, float) else called_at
    return page.evaluate("window.__appearedAt") / 1000 - start


def call_mcp(url: str, use: Callable[[Client], Awaitable[T]]) -> T:
    """Another agent's MCP session, run on its own event loop (Playwright's sync API owns this thread)."""

    async def session() -> T:
        async with streamable_session(url) as client:
            return await use(client)

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(anyio.run, session).result(timeout=60)


def mcp_tool(url: str, name: str, arguments: dict[str, Any]) -> Any:
    async def use(client: Client) -> Any:
        result = await client.call_tool(name, arguments)
        assert not result.is_error, result
        return payload(result)

    return call_mcp(url, use)


@pytest.mark.slow
def test_the_open_board_follows_tasks_other_agents_create_move_and_delete(
    make_settings: SettingsFactory, browser_page: BrowserPage
) -> None:
    page = browser_page.page
    with dashboard_server(make_settings(), browser_page) as server:
        follow_live(page, f"{server.url}/#board")
        created: dict[str, Any] = {}
        delay = seconds_until_shown(page, "Created over MCP", lambda: created.update(
            mcp_tool(server.url, "create_task", {"title": "Created over MCP", "assignee": "antigravity"})))
        task_id = created["id"]
        expect(page.locator(f".column[data-status='todo'] .card[data-id='{task_id}']")).to_contain_text("antigravity")
        assert delay < LIVE_BOUND_S, delay

        moved = httpx.post(f"{server.url}/api/kanban/tasks/{task_id}/move",
                           json={"to_status": "review", "actor": "openclaw"})
        assert moved.is_success, moved.text
        expect(page.locator(f".column[data-status='review'] .card[data-id='{task_id}']")).to_be_visible()
        expect(page.locator(".column[data-status='todo'] .card")).to_have_count(0)

        delay = seconds_until_shown(page, "Created over REST", lambda: httpx.post(
            f"{server.url}/api/kanban/tasks", json={"title": "Created over REST", "assignee": "claude-code"}))
        assert delay < LIVE_BOUND_S, delay
        assert httpx.delete(f"{server.url}/api/kanban/tasks/{task_id}").is_success
        expect(page.locator(f".card[data-id='{task_id}']")).to_have_count(0)
        assert_not_reloaded(page)
    assert browser_page.problems.messages == []


def test_an_open_task_is_redrawn_when_another_agent_changes_it_and_closed_when_it_is_deleted(
    make_settings: SettingsFactory, browser_page: BrowserPage
) -> None:
    page = browser_page.page
    with dashboard_server(make_settings(), browser_page) as server:
        task_id = httpx.post(f"{server.url}/api/kanban/tasks", json={"title": "Open me", "assignee": "a"}).json()["id"]
        follow_live(page, f"{server.url}/#board")
        page.locator(f".card[data-id='{task_id}']").click()
        dialog = page.locator("#task-dialog")
        expect(dialog.locator(".notes li")).to_have_count(0)
        httpx.post(f"{server.url}/api/kanban/tasks/{task_id}/notes", json={"text": "left by codex", "author": "codex"})
        expect(dialog.locator(".notes li")).to_contain_text("left by codex")

        dialog.get_by_label("New note").fill("half-written")
        httpx.patch(f"{server.url}/api/kanban/tasks/{task_id}", json={"title": "Renamed elsewhere"})
        expect(page.locator(f".card[data-id='{task_id}']")).to_contain_text("Renamed elsewhere")
        expect(dialog.get_by_label("New note")).to_have_value("half-written")  # never redrawn under typing

        dialog.get_by_label("New note").fill("")
        httpx.delete(f"{server.url}/api/kanban/tasks/{task_id}")
        expect(dialog).to_be_hidden()
        expect(page.locator("#notice")).to_contain_text(f"{task_id} was deleted")
        assert_not_reloaded(page)


@pytest.mark.slow
def test_the_open_memory_list_follows_other_agents_and_other_processes(
    make_settings: SettingsFactory, browser_page: BrowserPage
) -> None:
    page = browser_page.page
    settings = make_settings()
    with dashboard_server(settings, browser_page) as server:
        follow_live(page, f"{server.url}/#memories")
        expect(page.locator("#memory-empty")).to_be_visible()
        delay = seconds_until_shown(page, "remembered over MCP", lambda: mcp_tool(
            server.url, "remember", {"content": "remembered over MCP by antigravity", "agent": "antigravity"}))
        assert delay < LIVE_BOUND_S, delay
        expect(page.locator(".scope[data-scope='agent:antigravity'] .count")).to_have_text("1")

        delay = seconds_until_shown(page, "written by another process", lambda: write_directly(settings.db_path))
        assert delay < LIVE_BOUND_S, delay
        expect(page.locator(".scope[data-scope=''] .count")).to_have_text("2")
        assert_not_reloaded(page)
    assert browser_page.problems.messages == []


def write_directly(db_path: Path) -> float:
    """One memory appended straight to the LanceDB table by another OS process (as OpenClaw does);
    returns when that process began the write (its start-up, imports included, is not the page's time)."""
    history = db_path.parent / "external-history.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "tests.reliability.external_writer", str(db_path), "1", str(history),
         "written by another process"],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0 and "done" in done.stdout, done.stderr
    (event,) = load_events([history])
    assert event.outcome == "ok", event
    return event.t_invoke


def test_a_memory_being_edited_is_not_redrawn_by_a_live_update(
    make_settings: SettingsFactory, browser_page: BrowserPage
) -> None:
    page = browser_page.page
    with dashboard_server(make_settings(), browser_page) as server:
        httpx.post(f"{server.url}/api/lancedb/memories", json={"text": "mine to edit"})
        follow_live(page, f"{server.url}/#memories")
        page.locator("#memory-list .memory", has_text="mine to edit").get_by_role("button", name="Edit").click()
        editor = page.locator("#memory-list form.editing")
        editor.get_by_label("Memory text").fill("mine to edit, carefully")
        httpx.post(f"{server.url}/api/lancedb/memories", json={"text": "meanwhile from codex"})
        expect(page.locator(".scope[data-scope=''] .count")).to_have_text("2")  # the live reload ran...
        expect(editor.get_by_label("Memory text")).to_have_value("mine to edit, carefully")  # ...around the form
        editor.get_by_role("button", name="Cancel").click()
        expect(page.locator("#memory-list .memory", has_text="meanwhile from codex")).to_be_visible()


@pytest.mark.slow
def test_the_page_reconnects_after_a_server_restart_and_shows_the_next_write(
    tmp_path: Path, browser_page: BrowserPage
) -> None:
    page = browser_page.page
    env = {
        "MEMORY_MCP_DB_PATH": str(tmp_path / "lancedb"),
        "MEMORY_MCP_KANBAN_DB": str(tmp_path / "kanban.sqlite3"),
        "MEMORY_MCP_EMBEDDING_PROVIDER": "hash",
        "MEMORY_MCP_LOG_FORMAT": "text",
    }
    port = free_port()
    first_log = tmp_path / "first.log"
    with spawn_server(env, log_path=first_log, port=port) as server:
        follow_live(page, f"{server.url}/#board")
        stopped_at = time.monotonic()
        server.process.send_signal(signal.SIGTERM)  # with the page's stream open
        returncode = server.process.wait(15)
        stop_s = time.monotonic() - stopped_at
    log = first_log.read_text(encoding="utf-8", errors="replace")
    assert returncode == 0 and stop_s <= 5.0, (returncode, stop_s, log)
    for marker in ("Traceback", "Cancel", "Exception"):
        assert marker not in log, log  # the stream ended by itself, nothing was cut off
    expect(page.locator("#live-status")).to_have_attribute("data-state", "reconnecting")

    with spawn_server(env, log_path=tmp_path / "second.log", port=port) as server:
        expect(page.locator("#live-status")).to_have_attribute("data-state", "live", timeout=RESTART_TIMEOUT_MS)
        delay = seconds_until_shown(page, "After the restart", lambda: httpx.post(
            f"{server.url}/api/kanban/tasks", json={"title": "After the restart", "assignee": "openclaw"}))
        assert delay < LIVE_BOUND_S, delay
        assert_not_reloaded(page)
        page.goto("about:blank")  # let go of the stream before this server stops too
