"""The whole app behind EdgeGuard on a real uvicorn: every route family, refused before routing."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr
from starlette.routing import BaseRoute

from app.main import create_app
from app.settings import Settings
from tests.conftest import SettingsFactory
from tests.edge.support import Probe, RawResponse, count_requests, raw_request, serve_app
from tests.support.server import LiveServer, run_server

TOKEN = "tok-live-5f1c0e9a"
AUTH = f"Authorization: Bearer {TOKEN}"
ROUTE_FAMILIES = [
    "/api/lancedb/stats",
    "/api/lancedb/memories",
    "/api/lancedb/vector-search",
    "/api/kanban/board",
    "/api/kanban/tasks",
    "/api/kanban/jobs",
    "/mcp",
    "/mcp/sse",
    "/mcp/message",
    "/docs",
    "/openapi.json",
    "/readyz",
    "/healthz",
    "/",
]
BAD_HOSTS = [
    "Host: evil.example:3002",
    "Host: 127.0.0.1.evil.example",
    "Host: localhost:3002@evil",
    "Host: rebind.example:3002",
    "Host: 0.0.0.0:3002",
    None,  # no Host at all
]
EVIL_ORIGINS = ["http://evil.example", "null", "http://127.0.0.1:3002.evil.example"]


def every_path(app: FastAPI) -> list[str]:
    """The fixed families plus whatever the app registers today (path parameters filled in)."""
    routes: list[BaseRoute] = list(app.routes)
    found = {re.sub(r"\{[^}]+\}", "x", str(getattr(route, "path", "/"))) for route in routes}
    return sorted(set(ROUTE_FAMILIES) | found)


def request(port: int, method: str, path: str, *headers: str | None, body: bytes = b"") -> RawResponse:
    lines = [f"{method} {path} HTTP/1.1", *(h for h in headers if h is not None)]
    if body:
        lines.append(f"Content-Length: {len(body)}")
    return raw_request(port, "\r\n".join(lines).encode(), [body] if body else [])


@pytest.fixture
def secured(make_settings: SettingsFactory) -> Settings:
    return make_settings(token=SecretStr(TOKEN))


@pytest.fixture
def counted(secured: Settings) -> Iterator[tuple[int, Probe, FastAPI]]:
    """The real app with a request counter behind the guard, on a real uvicorn."""
    app = create_app(secured)
    probe = Probe()
    count_requests(app, probe)
    with serve_app(app) as port:
        yield port, probe, app


@pytest.fixture
def live(secured: Settings) -> Iterator[LiveServer]:
    with run_server(secured) as server:
        yield server


def test_bad_or_missing_host_is_421_on_every_route_even_with_a_valid_token(
    counted: tuple[int, Probe, FastAPI],
) -> None:
    port, probe, app = counted
    wrong = []
    for path in every_path(app):
        for method in ("GET", "POST", "DELETE"):
            for host in BAD_HOSTS:
                response = request(port, method, path, host, AUTH, body=b"{}" if method == "POST" else b"")
                if response.status != 421 or b'"misdirected_host"' not in response.body:
                    wrong.append((method, path, host, response.status))
    assert wrong == []
    assert probe.calls == 0
    assert request(port, "GET", "/healthz", f"Host: 127.0.0.1:{port}").status == 200
    assert probe.calls == 1


def test_evil_origins_are_403_on_every_route_even_with_a_valid_token(counted: tuple[int, Probe, FastAPI]) -> None:
    port, probe, app = counted
    wrong = []
    for path in every_path(app):
        for origin in EVIL_ORIGINS:
            for method in ("POST", "GET", "PATCH"):
                headers = ("Host: localhost", f"Origin: {origin}", AUTH, "Content-Type: text/plain")
                response = request(port, method, path, *headers, body=b"{}" if method != "GET" else b"")
                if response.status != 403 or b'"forbidden_origin"' not in response.body:
                    wrong.append((method, path, origin, response.status))
    assert wrong == []
    no_origin_cross_site = request(
        port,
        "POST",
        "/api/lancedb/memories",
        "Host: localhost",
        AUTH,
        "Sec-Fetch-Site: cross-site",
        "Sec-Fetch-Mode: no-cors",
        body=b"{}",
    )
    assert no_origin_cross_site.status == 403
    assert probe.calls == 0


def test_loopback_origins_and_originless_clients_get_past_the_guard(counted: tuple[int, Probe, FastAPI]) -> None:
    port, probe, _ = counted
    for origin in (f"Origin: http://127.0.0.1:{port}", f"Origin: http://localhost:{port}", None):
        assert request(port, "GET", "/readyz", f"Host: 127.0.0.1:{port}", origin, AUTH).status == 200
    assert probe.calls == 3


GUARD_CODES = {"misdirected_host", "forbidden_origin", "unauthorized", "payload_too_large"}


def guard_code(response: httpx.Response) -> object:
    """The ``code`` of a JSON error body, if the response is one (read only then: SSE stays unread)."""
    if response.status_code < 400 or not response.headers.get("content-type", "").startswith("application/json"):
        return None
    response.read()
    body = response.json()
    return body.get("code") if isinstance(body, dict) else None


def test_allowed_requests_reach_every_route_family(counted: tuple[int, Probe, FastAPI]) -> None:
    port, probe, app = counted
    paths = every_path(app)
    headers = {"Authorization": f"Bearer {TOKEN}", "Origin": f"http://localhost:{port}"}
    refused = []
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=10) as client:
        for path in paths:
            # Streamed and closed after the headers: /mcp/sse and GET /mcp would otherwise stay open.
            with client.stream("GET", path) as response:
                code = guard_code(response)
                if code in GUARD_CODES:
                    refused.append((path, response.status_code, code))
    assert refused == []
    assert probe.calls == len(paths)


UNAUTHORIZED_CASES = [
    ("/readyz", None),
    ("/readyz", "Authorization: Bearer wrong"),
    ("/readyz", f"Authorization: Bearer {TOKEN} "),
    ("/readyz", f"Authorization: Bearer {TOKEN}x"),
    ("/readyz", f"Authorization: bearer{TOKEN}"),
    (f"/readyz?token={TOKEN}", None),
    (f"/readyz?access_token={TOKEN}", None),
    (f"/mcp/sse?token={TOKEN}", None),
    ("/mcp", "Authorization: Basic dXNlcjpwYXNz"),
    ("/mcp/message?session_id=abc", None),
    ("/api/lancedb/stats", None),
    ("/api/kanban/board", None),
    ("/openapi.json", None),
    ("/docs", None),
]


def test_missing_wrong_trailing_space_or_query_tokens_are_401_with_www_authenticate(live: LiveServer) -> None:
    wrong = []
    for target, authorization in UNAUTHORIZED_CASES:
        for method in ("GET", "POST"):
            response = request(live.port, method, target, "Host: 127.0.0.1", authorization)
            if (response.status, response.header("www-authenticate")) != (401, "Bearer") or (
                b'"unauthorized"' not in response.body
            ):
                wrong.append((method, target, authorization, response.status))
    assert wrong == []


def test_the_right_token_passes_and_healthz_is_open(live: LiveServer) -> None:
    with httpx.Client(base_url=live.url) as client:
        assert client.get("/healthz").status_code == 200
        assert client.get("/openapi.json", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        assert client.get("/readyz", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        assert client.get("/readyz").status_code == 401


def test_oversized_declared_bodies_are_413_before_routing(live: LiveServer) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    with httpx.Client(base_url=live.url, headers=headers) as client:
        for path in ("/api/lancedb/memories", "/mcp", "/mcp/message?session_id=x", "/api/kanban/tasks"):
            for size in (2 * 1024 * 1024, 5 * 1024 * 1024):
                response = client.post(path, content=b"{" + b" " * (size - 2) + b"}")
                assert response.status_code == 413, (path, size)
                assert response.json()["code"] == "payload_too_large"


def test_cors_is_absent_by_default(live: LiveServer) -> None:
    preflight_evil = request(
        live.port,
        "OPTIONS",
        "/api/lancedb/memories",
        "Host: localhost",
        "Origin: http://evil.example",
        "Access-Control-Request-Method: POST",
    )
    preflight_local = request(
        live.port,
        "OPTIONS",
        "/api/lancedb/memories",
        "Host: localhost",
        "Origin: http://localhost:5173",
        "Access-Control-Request-Method: POST",
    )
    simple = request(live.port, "GET", "/readyz", "Host: localhost", "Origin: http://localhost:5173", AUTH)
    assert preflight_evil.status == 403 and simple.status == 200
    for response in (preflight_evil, preflight_local, simple):
        assert not [name for name in response.headers if name.startswith("access-control-")]


def test_cors_answers_only_listed_origins_when_configured(make_settings: SettingsFactory) -> None:
    dashboard = "http://dash.example:8080"
    settings = make_settings(token=SecretStr(TOKEN), cors_origins=[dashboard])
    with run_server(settings) as live:
        preflight = request(
            live.port,
            "OPTIONS",
            "/api/lancedb/memories",
            "Host: localhost",
            f"Origin: {dashboard}",
            "Access-Control-Request-Method: POST",
            "Access-Control-Request-Headers: authorization, content-type",
        )
        simple = request(live.port, "GET", "/readyz", "Host: localhost", f"Origin: {dashboard}", AUTH)
        other = request(live.port, "GET", "/readyz", "Host: localhost", "Origin: http://localhost:5173", AUTH)
        evil = request(
            live.port,
            "OPTIONS",
            "/readyz",
            "Host: localhost",
            "Origin: http://evil.example",
            "Access-Control-Request-Method: POST",
        )
    assert preflight.status == 204
    assert preflight.header("access-control-allow-origin") == dashboard
    assert "Authorization" in (preflight.header("access-control-allow-headers") or "")
    assert simple.status == 200 and simple.header("access-control-allow-origin") == dashboard
    assert other.status == 200 and other.header("access-control-allow-origin") is None
    assert evil.status == 403 and evil.header("access-control-allow-origin") is None
    for response in (preflight, simple, other, evil):
        assert response.header("access-control-allow-credentials") is None
        assert "*" not in (response.header("access-control-allow-origin") or "")


def test_request_id_is_echoed_or_minted(live: LiveServer) -> None:
    with httpx.Client(base_url=live.url) as client:
        assert (
            client.get("/healthz", headers={"X-Request-ID": "run-7.step_3"}).headers["x-request-id"] == "run-7.step_3"
        )
        minted = client.get("/healthz", headers={"X-Request-ID": "no spaces please"}).headers["x-request-id"]
        refused = client.get("/readyz").headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", minted) and re.fullmatch(r"[0-9a-f]{32}", refused)
