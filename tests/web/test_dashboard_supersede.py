"""The dashboard shows which memory replaced which: a real browser against a real server (hash embedder)."""

from __future__ import annotations

import json
import time

import httpx
import lancedb
from playwright.sync_api import expect

from tests.conftest import SettingsFactory
from tests.web.conftest import BrowserPage, dashboard_server
from tests.web.test_dashboard_memories import memory_item, search

OLD = "timestamps must be milliseconds in every API payload"
NEW = "timestamps are now seconds in every API payload"


def test_the_list_dims_a_superseded_memory_and_badges_both_ends_of_the_link(
    make_settings: SettingsFactory, browser_page: BrowserPage
) -> None:
    page = browser_page.page
    with dashboard_server(make_settings(), browser_page) as server:
        memories = f"{server.url}/api/lancedb/memories"
        old = httpx.post(memories, json={"text": OLD}).json()["id"]
        new = httpx.post(memories, json={"text": NEW, "supersedes": old}).json()["id"]
        page.goto(f"{server.url}/#memories")
        older, newer = memory_item(page, OLD), memory_item(page, NEW)
        expect(older.locator(".badge.superseded-by")).to_have_text(f"superseded by {new}")
        expect(newer.locator(".badge.supersedes")).to_have_text(f"supersedes {old}")
        expect(older).to_have_class("memory superseded")
        expect(newer).to_have_class("memory")
        assert float(older.evaluate("el => getComputedStyle(el).opacity")) < 1.0
        assert newer.evaluate("el => getComputedStyle(el).opacity") == "1"
        expect(newer.locator(".badge.superseded-by")).to_have_count(0)
        browser_page.screenshot("dashboard-superseded")

        search(page, "timestamps API payload", "Semantic search")
        expect(page.locator("#memory-list .memory")).to_have_count(1)
        expect(memory_item(page, NEW).locator(".badge.supersedes")).to_have_text(f"supersedes {old}")
    assert browser_page.problems.messages == []


def test_a_memory_the_plugin_retired_is_dimmed_in_the_list_and_hidden_from_search(
    make_settings: SettingsFactory, browser_page: BrowserPage
) -> None:
    page = browser_page.page
    settings = make_settings()
    with dashboard_server(settings, browser_page) as server:
        memories = f"{server.url}/api/lancedb/memories"
        retired = httpx.post(memories, json={"text": OLD}).json()["id"]
        httpx.post(memories, json={"text": NEW})
        _in_table(server.url)
        # memory-lancedb-pro's dreaming engine archives a duplicate: invalidated_at, no replacement named.
        table = lancedb.connect(str(settings.db_path)).open_table(settings.table)
        [row] = table.search().where(f"id = '{retired}'").select(["metadata"]).to_list()
        metadata = {**json.loads(row["metadata"]), "invalidated_at": int(time.time() * 1000), "state": "archived"}
        table.update(where=f"id = '{retired}'", values={"metadata": json.dumps(metadata)})

        page.goto(f"{server.url}/#memories")
        older = memory_item(page, OLD)
        expect(older.locator(".badge.superseded-by")).to_have_text("retired")
        expect(older).to_have_class("memory superseded")
        search(page, "timestamps API payload", "Semantic search")
        expect(page.locator("#memory-list .memory")).to_have_count(1)
        expect(memory_item(page, NEW)).to_have_class("memory")
    assert browser_page.problems.messages == []


def _in_table(url: str, within_s: float = 30.0) -> None:
    """Until the journal has folded the writes into the table, which the plugin reads and writes itself."""
    deadline = time.monotonic() + within_s
    while httpx.get(f"{url}/readyz").json()["memory"]["journal"]["depth"]:
        assert time.monotonic() < deadline, "the writes never reached the table"
        time.sleep(0.05)  # polling the server's state, bounded by the deadline
