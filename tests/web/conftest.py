"""A real headless Chromium (Debian's package) driven by Playwright against a real server.

The project cannot download a browser, so ``playwright install`` is never run: the tests use
``/usr/bin/chromium`` and fail, with the install line, when it is missing.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, Playwright, expect, sync_playwright

from app.settings import Settings
from tests.support.server import LiveServer, run_server

CHROMIUM = Path(os.environ.get("MEMORY_MCP_TEST_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",  # CI runs as root, where Chromium's sandbox refuses to start
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
TIMEZONE = "Asia/Taipei"  # not the machine's UTC, so local-time rendering is really exercised
# Generous waits: CI's 2 cores may be busy with other suites; a passing check returns at once anyway.
ACTION_TIMEOUT_MS = 15_000
expect.set_options(timeout=ACTION_TIMEOUT_MS)


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    """Chromium with a fresh temporary profile (Playwright makes one per launch and deletes it)."""
    if not CHROMIUM.exists() or shutil.which(str(CHROMIUM)) is None:
        pytest.fail(
            f"headless Chromium not found at {CHROMIUM}. Install Debian's package: "
            "`apt-get update && apt-get install -y chromium` (never `playwright install`).",
            pytrace=False,
        )
    launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=60_000)
    yield launched
    launched.close()


@dataclass
class PageProblems:
    """Console errors and uncaught exceptions seen by the page: a clean run has none."""

    messages: list[str] = field(default_factory=list)

    def console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.messages.append(f"console: {message.text}")

    def exception(self, error: Exception) -> None:
        self.messages.append(f"page error: {error}")


@dataclass
class BrowserPage:
    page: Page
    problems: PageProblems

    def screenshot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path


@pytest.fixture
def browser_page(browser: Browser) -> Iterator[BrowserPage]:
    context = browser.new_context(viewport={"width": 1400, "height": 900}, locale="en-GB", timezone_id=TIMEZONE)
    context.set_default_timeout(ACTION_TIMEOUT_MS)
    page = context.new_page()
    problems = PageProblems()
    page.on("console", problems.console)
    page.on("pageerror", problems.exception)
    yield BrowserPage(page=page, problems=problems)
    context.close()


@contextmanager
def dashboard_server(settings: Settings, browser_page: BrowserPage) -> Iterator[LiveServer]:
    """``run_server`` for a test with a page on it: the page leaves before the server stops.

    The page holds an event stream open. A server in a thread is stopped by a flag the app cannot
    see, so that stream would hold uvicorn's graceful shutdown for its whole timeout; a real
    ``memory-mcp serve`` ends its streams itself on SIGTERM (see test_live_updates.py).
    """
    with run_server(settings) as server:
        try:
            yield server
        finally:
            browser_page.page.goto("about:blank")
