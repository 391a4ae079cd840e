"""Host and Origin parsing: exact grammar, so look-alike names never pass as loopback."""

from __future__ import annotations

import pytest

from app.edge.hosts import HostPolicy
from app.edge.origins import OriginPolicy, is_cross_site_without_origin, parse_origin_list

DEFAULT = HostPolicy([])


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "127.0.0.1:3002", "localhost", "LOCALHOST:80", "[::1]", "[::1]:3002", "[0:0:0:0:0:0:0:1]:9"],
)
def test_loopback_hosts_on_any_port_are_allowed_by_default(host: str) -> None:
    assert DEFAULT.allows(host)


@pytest.mark.parametrize(
    "host",
    [
        None,
        "",
        "evil.example",
        "evil.example:3002",
        "127.0.0.1.evil.example",
        "localhost.evil.example:3002",
        "localhost:3002@evil",
        "user@localhost:3002",
        "localhost:3002/x",
        "localhost:",
        "localhost:99999",
        "localhost:3002:3002",
        "localhost.",
        "127.1",
        "0.0.0.0:3002",
        "[::]:3002",
        "[::1",
        "::1",
        "local host",
        "lоcalhost",  # Cyrillic o
        "*",
        "localhost:*",
        "memory-mcp:3002",
    ],
)
def test_other_or_malformed_hosts_are_refused_by_default(host: str | None) -> None:
    assert not DEFAULT.allows(host)


def test_configured_host_without_port_is_allowed_on_any_port() -> None:
    policy = HostPolicy(["memory-mcp"])
    assert policy.allows("memory-mcp:3002")
    assert policy.allows("memory-mcp")
    assert not policy.allows("memory-mcp.evil.example:3002")


def test_configured_host_with_port_allows_only_that_port_and_star_allows_any() -> None:
    policy = HostPolicy(["memory-mcp:3002", "dash.internal:*", "[fd00::5]:80"])
    assert policy.allows("memory-mcp:3002")
    assert not policy.allows("memory-mcp:3003")
    assert not policy.allows("memory-mcp")
    assert policy.allows("dash.internal:1234")
    assert policy.allows("[fd00:0::5]:80")


def test_non_loopback_bind_host_is_allowed_but_a_wildcard_bind_is_not_a_host_name() -> None:
    assert HostPolicy([], bind_host="192.168.1.20").allows("192.168.1.20:3002")
    assert HostPolicy([], bind_host="fd00::7").allows("[fd00::7]:3002")
    assert not HostPolicy([], bind_host="0.0.0.0").allows("0.0.0.0:3002")
    assert not HostPolicy([], bind_host="::").allows("[::]:3002")


def test_malformed_allowed_host_entry_stops_start_up_naming_the_setting() -> None:
    with pytest.raises(ValueError, match="MEMORY_MCP_ALLOWED_HOSTS"):
        HostPolicy(["evil@host"])


LOOPBACK_ORIGINS = OriginPolicy(set())


@pytest.mark.parametrize(
    "origin", ["http://127.0.0.1:3002", "http://localhost:3002", "https://localhost", "http://[::1]:5173"]
)
def test_loopback_origins_are_allowed_by_default(origin: str) -> None:
    assert LOOPBACK_ORIGINS.allows(origin)


@pytest.mark.parametrize(
    "origin",
    [
        "null",
        "",
        "http://evil.example",
        "http://127.0.0.1:3002.evil.example",
        "http://localhost.evil.example:3002",
        "http://localhost:3002@evil.example",
        "http://localhost:3002/",
        "file://localhost",
        "ws://localhost:3002",
        "http://127.0.0.2:8080",
        "http://localhost:3002 http://evil.example",
    ],
)
def test_foreign_null_and_malformed_origins_are_refused(origin: str) -> None:
    assert not LOOPBACK_ORIGINS.allows(origin)


def test_configured_origins_match_exactly_with_default_ports_filled_in() -> None:
    policy = OriginPolicy(parse_origin_list(["https://dash.example/", "http://tools.example:*"], "X"))
    assert policy.allows("https://dash.example")
    assert policy.allows("https://dash.example:443")
    assert not policy.allows("http://dash.example")
    assert not policy.allows("https://dash.example:8443")
    assert policy.allows("http://tools.example:9000")


def test_a_star_origin_entry_is_refused_at_start_up() -> None:
    with pytest.raises(ValueError, match="MEMORY_MCP_CORS_ORIGINS"):
        parse_origin_list(["*"], "MEMORY_MCP_CORS_ORIGINS")


@pytest.mark.parametrize(
    ("method", "site", "mode", "refused"),
    [
        ("POST", "cross-site", "no-cors", True),
        ("GET", "cross-site", "no-cors", True),
        ("GET", "cross-site", "navigate", False),
        ("POST", "cross-site", "navigate", True),
        ("POST", "same-origin", "cors", False),
        ("POST", "none", "navigate", False),
        ("POST", None, None, False),
    ],
)
def test_fetch_metadata_refuses_cross_site_requests_without_origin_except_navigations(
    method: str, site: str | None, mode: str | None, refused: bool
) -> None:
    assert is_cross_site_without_origin(method, site, mode) is refused
