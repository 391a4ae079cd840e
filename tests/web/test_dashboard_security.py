"""The dashboard's defences: a CSP that allows only its own files, the edge rules, and the token prompt."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import expect

from app.edge.auth import OPEN_PATHS
from app.web.routes import ASSETS, STATIC_DIR
from tests.conftest import SettingsFactory
from tests.support.server import LiveServer
from tests.web.conftest import BrowserPage, dashboard_server

TOKEN = "dashboard-test-token-7f3a"
ABSOLUTE_URL = re.compile(r"\b(?:https?:)?//[a-z0-9.-]+", re.IGNORECASE)


def csp_directives(header: str) -> dict[str, list[str]]:
    directives: dict[str, list[str]] = {}
    for part in header.split(";"):
        name, *values = part.split()
        directives[name.lower()] = values
    return directives


class _Markup(HTMLParser):
    """Collects what could run or load from elsewhere: scripts, event-handler attributes, URLs."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[dict[str, str | None]] = []
        self.inline_script_text = ""
        self.handlers: list[str] = []
        self.urls: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "script":
            self.scripts.append(values)
            self._in_script = True
        self.handlers += [name for name, _ in attrs if name.startswith("on")]
        self.urls += [value for name, value in attrs if name in ("src", "href", "action") and value]

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.inline_script_text += data.strip()


def test_page_is_served_with_a_csp_that_forbids_inline_scripts_and_other_origins(live_server: LiveServer) -> None:
    response = httpx.get(f"{live_server.url}/")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    csp = csp_directives(response.headers["content-security-policy"])
    assert csp["default-src"] == ["'none'"]
    assert csp["script-src"] == ["'self'"]
    assert csp["style-src"] == ["'self'"]
    assert csp["connect-src"] == ["'self'"]
    assert csp["frame-ancestors"] == ["'none'"]
    assert csp["base-uri"] == ["'none'"]
    for name, values in csp.items():
        assert not {"'unsafe-inline'", "'unsafe-eval'", "*", "http:", "https:"} & set(values), name
        assert not any(ABSOLUTE_URL.search(value) for value in values), name
    assert response.headers["x-content-type-options"] == "nosniff"

    markup = _Markup()
    markup.feed(response.text)
    assert [(script.get("src"), script.get("type")) for script in markup.scripts] == [("/static/app.js", "module")]
    assert markup.inline_script_text == ""
    assert markup.handlers == []
    assert all(url.startswith("/static/") or url.startswith("#") or url == "data:," for url in markup.urls)


def test_assets_are_served_with_their_types_and_reference_nothing_outside(live_server: LiveServer) -> None:
    for name in ASSETS:
        media_type = "text/css" if name.endswith(".css") else "text/javascript"
        response = httpx.get(f"{live_server.url}/static/{name}")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith(media_type)
        assert "content-security-policy" in response.headers
        assert not ABSOLUTE_URL.search(re.sub(r"^\s*//.*$", "", response.text, flags=re.MULTILINE)), name
    for script in STATIC_DIR.glob("*.js"):
        text = script.read_text(encoding="utf-8")
        # Untrusted memory text must never be parsed as markup.
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
            assert sink not in text, (script.name, sink)
        # Modules import only their siblings, by a path the asset route serves.
        for imported in re.findall(r'^import .* from "([^"]+)";$', text, flags=re.MULTILINE):
            assert imported.startswith("./") and imported[2:] in ASSETS, (script.name, imported)


def test_unknown_or_traversing_asset_names_are_not_found(live_server: LiveServer) -> None:
    for path in ["/static/missing.js", "/static/..%2Froutes.py", "/static/index.html%00.js"]:
        response = httpx.get(f"{live_server.url}{path}")
        assert response.status_code == 404, path
        assert "APIRouter" not in response.text, path
    assert httpx.get(f"{live_server.url}/static/missing.js").json()["code"] == "asset_not_found"


def test_dashboard_obeys_the_edge_host_and_origin_rules(live_server: LiveServer) -> None:
    for path in ["/", "/static/app.js"]:
        assert httpx.get(f"{live_server.url}{path}", headers={"Host": "evil.example"}).status_code == 421
        assert httpx.get(f"{live_server.url}{path}", headers={"Origin": "http://evil.example"}).status_code == 403


def test_the_browser_refuses_inline_and_third_party_scripts_on_the_page(
    live_server: LiveServer, browser_page: BrowserPage
) -> None:
    page = browser_page.page
    page.goto(f"{live_server.url}/")
    expect(page.locator("#scope-list .scope").first).to_be_visible()
    violations = page.evaluate_handle(
        "(() => { const seen = []; document.addEventListener('securitypolicyviolation',"
        " (e) => seen.push(e.violatedDirective)); return seen; })()"
    )
    for attempt in ({"content": "window.__inline = 1"}, {"url": "http://localhost:9/evil.js"}):
        with pytest.raises(PlaywrightError):
            page.add_script_tag(**attempt)
    assert page.evaluate("window.__inline") is None
    page.wait_for_function("(seen) => seen.length >= 2", arg=violations)
    assert set(page.evaluate("(seen) => seen", violations)) <= {"script-src-elem", "script-src"}


@pytest.mark.slow
def test_with_a_token_the_page_asks_once_keeps_it_for_the_tab_and_sends_it_as_bearer(
    make_settings: SettingsFactory, browser_page: BrowserPage
) -> None:
    page = browser_page.page
    with dashboard_server(make_settings(token=TOKEN), browser_page) as server:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        assert httpx.get(f"{server.url}/api/lancedb/stats").status_code == 401
        created = httpx.post(f"{server.url}/api/lancedb/memories", json={"text": "behind the token"}, headers=auth)
        assert created.is_success, created.text

        # The page shell holds no data and is served without a token (a navigation cannot carry one).
        assert httpx.get(f"{server.url}/").status_code == 200
        for name in ASSETS:
            assert httpx.get(f"{server.url}/static/{name}").status_code == 200, name
        api_auth: list[str | None] = []
        page.on("request", lambda r: api_auth.append(r.headers.get("authorization")) if "/api/" in r.url else None)

        page.goto(f"{server.url}/")
        dialog = page.locator("#token-dialog")
        expect(dialog).to_be_visible()
        expect(dialog).to_contain_text("This server needs a token.")
        browser_page.screenshot("dashboard-token-prompt")
        dialog.get_by_label("Token").fill("not-the-token")
        dialog.get_by_role("button", name="Use token").click()
        expect(dialog).to_contain_text("refused that token")
        dialog.get_by_label("Token").fill(TOKEN)
        dialog.get_by_role("button", name="Use token").click()
        expect(page.locator("#memory-list .memory")).to_contain_text("behind the token")
        assert page.evaluate("sessionStorage.getItem('memory-mcp-token')") == TOKEN
        assert f"Bearer {TOKEN}" in api_auth

        api_auth.clear()
        page.reload()
        expect(page.locator("#memory-list .memory")).to_contain_text("behind the token")
        expect(dialog).to_be_hidden()
        assert api_auth and set(api_auth) == {f"Bearer {TOKEN}"}
        expect(page.get_by_role("button", name="Forget token")).to_be_visible()


def test_static_dir_holds_only_the_page_and_its_listed_assets_all_open_to_the_browser() -> None:
    assert sorted(p.name for p in Path(STATIC_DIR).iterdir()) == sorted(["index.html", *ASSETS])
    # A navigation and a module import cannot carry the bearer header: every asset is served openly.
    assert {path for path in OPEN_PATHS if path.startswith("/static/")} == {f"/static/{name}" for name in ASSETS}
