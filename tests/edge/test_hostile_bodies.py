"""No body makes a 500: every JSON entry point answers deep or oversized JSON with a 400 or 413 in JSON."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from app.settings import Settings
from tests.support.server import LiveServer

DEEP_ARRAY = b"[" * 50_000 + b"]" * 50_000  # the 50k levels of the report, about 100 KB
DEEP_OBJECT = b'{"a":' * 40_000 + b"1" + b"}" * 40_000  # about 240 KB
PARSEABLE_BUT_DEEP = (
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"recall","arguments":{"query":'
    + b"[" * 900 + b"]" * 900 + b"}}}"
)
STREAMABLE = {"accept": "application/json, text/event-stream"}


@pytest.fixture
def endpoints(live_server: LiveServer) -> Iterator[dict[str, tuple[str, dict[str, str]]]]:
    """Every JSON entry point, two live legacy sessions included (a stream reader's and a raw client's)."""
    with httpx.Client(base_url=live_server.url, timeout=30) as http, \
            http.stream("GET", "/mcp/sse", headers={"Accept": "text/event-stream"}) as reader, \
            http.stream("GET", "/mcp/sse") as raw:
        reader_lines, raw_lines = reader.iter_lines(), raw.iter_lines()
        next(reader_lines), next(raw_lines)
        reader_endpoint = next(reader_lines).removeprefix("data: ")
        raw_endpoint = next(raw_lines).split('"uri": "')[1].rstrip('"}')
        yield {
            "rest memory": ("/api/lancedb/memories", {}),
            "rest kanban": ("/api/kanban/tasks", {}),
            "streamable http": ("/mcp", STREAMABLE),
            "legacy without session": ("/mcp/message", {}),
            "legacy stream session": (reader_endpoint, {}),
            "legacy raw session": (raw_endpoint, {}),
        }


def _post(base: str, path: str, headers: dict[str, str], body: bytes) -> httpx.Response:
    return httpx.post(f"{base}{path}", content=body, headers={"content-type": "application/json", **headers},
                      timeout=30)


@pytest.mark.parametrize("body", [DEEP_ARRAY, DEEP_OBJECT, PARSEABLE_BUT_DEEP], ids=["array", "object", "900"])
def test_deeply_nested_json_is_a_json_4xx_at_every_entry_point(
    live_server: LiveServer, endpoints: dict[str, tuple[str, dict[str, str]]], body: bytes
) -> None:
    statuses = {}
    for name, (path, headers) in endpoints.items():
        response = _post(live_server.url, path, headers, body)
        assert response.headers["content-type"].startswith("application/json"), (name, response.text[:200])
        assert response.json(), name
        statuses[name] = response.status_code
    # A 900-deep query parses, so the tool refuses it (in a JSON-RPC reply, or on a reader's stream).
    assert all(400 <= status < 500 or (body is PARSEABLE_BUT_DEEP and status in (200, 202))
               for status in statuses.values()), statuses
    if body is not PARSEABLE_BUT_DEEP:
        assert set(statuses.values()) == {400}, statuses


def test_an_oversized_body_is_a_json_413_at_every_entry_point(
    live_server: LiveServer, endpoints: dict[str, tuple[str, dict[str, str]]], settings: Settings
) -> None:
    body = b'{"pad": "' + b"x" * settings.max_body_bytes + b'"}'
    for name, (path, headers) in endpoints.items():
        response = _post(live_server.url, path, headers, body)
        assert response.status_code == 413, (name, response.status_code)
        assert response.json()["code"] == "payload_too_large", name
