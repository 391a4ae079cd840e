"""EdgeGuard around a small probe app on a real uvicorn: agent binding and streamed body limits."""

from __future__ import annotations

import json
from collections.abc import Iterator

import psutil
import pytest
from pydantic import SecretStr

from app.settings import Settings
from tests.conftest import SettingsFactory
from tests.edge.support import Probe, chunked, probe_app, raw_request, serve_app

TOKEN = "tok-probe-main-77"
AGENT_TOKEN = "tok-probe-agent-42"
MIB = 1024 * 1024


@pytest.fixture
def secured(make_settings: SettingsFactory) -> Settings:
    return make_settings(token=SecretStr(TOKEN), agent_tokens={AGENT_TOKEN: "claude-code"})


@pytest.fixture
def served(secured: Settings) -> Iterator[tuple[int, Probe]]:
    probe = Probe()
    with serve_app(probe_app(secured, probe)) as port:
        yield port, probe


def get(port: int, path: str, token: str) -> dict[str, object]:
    response = raw_request(port, f"GET {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}".encode())
    assert response.status == 200
    return dict(json.loads(response.body))


def test_agent_token_sets_request_state_agent_and_main_token_leaves_it_none(served: tuple[int, Probe]) -> None:
    port, _ = served
    assert get(port, "/probe", AGENT_TOKEN)["agent"] == "claude-code"
    main = get(port, "/probe", TOKEN)
    assert main["agent"] is None and main["token_id"] == "main"


def test_request_state_carries_the_echoed_request_id(served: tuple[int, Probe]) -> None:
    port, probe = served
    head = f"GET /probe HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {TOKEN}\r\nX-Request-ID: abc-123"
    response = raw_request(port, head.encode())
    assert response.header("x-request-id") == "abc-123"
    assert probe.seen[-1]["request_id"] == "abc-123"


def upload_head(extra: str = "") -> bytes:
    return f"POST /upload HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {TOKEN}{extra}".encode()


def test_declared_2_mib_body_is_413_without_reaching_the_app(served: tuple[int, Probe]) -> None:
    port, probe = served
    body = b"x" * (2 * MIB)
    response = raw_request(port, upload_head(f"\r\nContent-Length: {len(body)}"), [body])
    assert response.status == 413 and json.loads(response.body)["code"] == "payload_too_large"
    assert probe.calls == 0


def test_chunked_10_mb_body_is_cut_with_413_without_growing_memory(served: tuple[int, Probe]) -> None:
    port, probe = served
    process = psutil.Process()
    before = process.memory_info().rss
    response = raw_request(port, upload_head("\r\nTransfer-Encoding: chunked"), chunked(b"y" * 65536, 10_000_000))
    grown = process.memory_info().rss - before
    assert response.status == 413
    assert json.loads(response.body)["code"] == "payload_too_large"
    assert grown < 20 * MIB, f"RSS grew {grown / MIB:.1f} MiB"
    # The app saw at most the limit (plus the chunk that crossed it); the other ~9 MB were never kept.
    (seen,) = probe.seen
    uploaded = seen["upload_bytes"]
    assert isinstance(uploaded, int) and 0 < uploaded <= MIB


def test_chunked_body_under_the_limit_reaches_the_app_whole(served: tuple[int, Probe]) -> None:
    port, _ = served
    response = raw_request(port, upload_head("\r\nTransfer-Encoding: chunked"), chunked(b"z" * 1000, 900_000))
    assert response.status == 200
    assert json.loads(response.body) == {"size": 900_000}


def test_connection_is_reusable_after_a_413(served: tuple[int, Probe]) -> None:
    import httpx

    port, _ = served
    headers = {"Host": "localhost", "Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers) as client:
        assert client.post("/upload", content=b"x" * (2 * MIB)).status_code == 413
        assert client.post("/upload", content=b"x" * 10).json() == {"size": 10}
