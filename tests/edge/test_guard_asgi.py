"""EdgeGuard as a plain ASGI callable around a fake inner app: what passes, what the app is told."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import SecretStr
from starlette.types import Message, Receive, Scope, Send

from app.edge.guard import EdgeGuard
from app.logging_setup import request_id_var
from app.settings import Settings
from tests.conftest import SettingsFactory

TOKEN = "tok-main-0123456789"
AGENT_TOKEN = "tok-agent-abcdef"


class InnerApp:
    """Records each scope it is called with and the request id it sees; answers 200."""

    def __init__(self) -> None:
        self.scopes: list[Scope] = []
        self.request_ids: list[str | None] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.scopes.append(scope)
        self.request_ids.append(request_id_var.get())
        if scope["type"] == "http":
            while (await receive()).get("more_body"):
                pass
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"inner"})


async def call(
    guard: EdgeGuard,
    headers: dict[str, str] | list[tuple[str, str]] | None = None,
    *,
    path: str = "/api/lancedb/stats",
    method: str = "GET",
    scope_type: str = "http",
    body: list[bytes] | None = None,
    extensions: dict[str, Any] | None = None,
) -> list[Message]:
    pairs = list(headers.items()) if isinstance(headers, dict) else list(headers or [("host", "127.0.0.1:3002")])
    scope: Scope = {
        "type": scope_type,
        "method": method,
        "path": path,
        "query_string": b"",
        "headers": [(k.lower().encode(), v.encode("latin-1")) for k, v in pairs],
        "client": ("127.0.0.1", 5555),
        "extensions": extensions or {},
    }
    chunks = list(body or [b""])
    sent: list[Message] = []

    async def receive() -> Message:
        if scope_type == "websocket":
            return {"type": "websocket.connect"}
        chunk = chunks.pop(0) if chunks else b""
        return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}

    async def send(message: Message) -> None:
        sent.append(message)

    await guard(scope, receive, send)
    return sent


def status_of(sent: list[Message]) -> int:
    return int(next(m for m in sent if m["type"].endswith("response.start"))["status"])


def headers_of(sent: list[Message]) -> dict[bytes, bytes]:
    start = next(m for m in sent if "headers" in m)
    return dict(start["headers"])


def json_of(sent: list[Message]) -> dict[str, Any]:
    return json.loads(b"".join(m.get("body", b"") for m in sent if m["type"].endswith("body")))


def host(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {"host": "localhost:3002", **(extra or {})}


@pytest.fixture
def secured(make_settings: SettingsFactory) -> Settings:
    return make_settings(token=SecretStr(TOKEN), agent_tokens={AGENT_TOKEN: "claude-code"})


async def test_lifespan_passes_through_untouched(settings: Settings) -> None:
    seen: list[Scope] = []

    async def inner(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(scope)

    scope: Scope = {"type": "lifespan"}
    await EdgeGuard(inner, settings)(scope, _never, _never)
    assert seen == [scope] and seen[0] is scope


async def _never(*_: object) -> Any:
    raise AssertionError("the guard must not touch lifespan messages")


async def test_main_token_passes_with_no_agent_and_agent_token_binds_its_agent(secured: Settings) -> None:
    inner = InnerApp()
    guard = EdgeGuard(inner, secured)
    assert status_of(await call(guard, host({"authorization": f"Bearer {TOKEN}"}))) == 200
    assert status_of(await call(guard, host({"authorization": f"bearer {AGENT_TOKEN}"}))) == 200
    assert [s["state"]["agent"] for s in inner.scopes] == [None, "claude-code"]
    main_id, agent_id = (s["state"]["token_id"] for s in inner.scopes)
    assert main_id == "main"
    # The agent's name plus a digest of the token, so two tokens of one agent are two identities.
    assert agent_id.startswith("agent:claude-code:") and AGENT_TOKEN not in agent_id


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "",
        "Bearer",
        "Bearer ",
        "Bearer wrong-token",
        f"Bearer {TOKEN} ",
        f"Bearer  {TOKEN}",
        f"Bearer {TOKEN}x",
        f"Bearer {TOKEN[:-1]}",
        f"Basic {TOKEN}",
        TOKEN,
        f"Bearer {TOKEN} {TOKEN}",
    ],
)
async def test_missing_or_wrong_token_is_401_with_www_authenticate_and_never_reaches_the_app(
    secured: Settings, authorization: str | None
) -> None:
    inner = InnerApp()
    extra = {} if authorization is None else {"authorization": authorization}
    sent = await call(EdgeGuard(inner, secured), host(extra))
    assert status_of(sent) == 401
    assert headers_of(sent)[b"www-authenticate"] == b"Bearer"
    assert json_of(sent)["code"] == "unauthorized"
    assert inner.scopes == []


async def test_two_authorization_headers_are_refused_even_if_one_is_right(secured: Settings) -> None:
    inner = InnerApp()
    pairs = [("host", "localhost"), ("authorization", f"Bearer {TOKEN}"), ("authorization", "Bearer x")]
    assert status_of(await call(EdgeGuard(inner, secured), pairs)) == 401
    assert inner.scopes == []


async def test_healthz_is_open_without_a_token(secured: Settings) -> None:
    inner = InnerApp()
    assert status_of(await call(EdgeGuard(inner, secured), host(), path="/healthz")) == 200
    assert inner.scopes[0]["state"]["agent"] is None


async def test_healthz_still_needs_an_allowed_host(secured: Settings) -> None:
    inner = InnerApp()
    sent = await call(EdgeGuard(inner, secured), {"host": "evil.example"}, path="/healthz")
    assert status_of(sent) == 421 and inner.scopes == []


def test_token_comparison_is_constant_time(monkeypatch: pytest.MonkeyPatch, secured: Settings) -> None:
    import app.edge.auth as auth

    compared: list[tuple[bytes, bytes]] = []
    real = auth.hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(auth.hmac, "compare_digest", spy)
    caller = auth.TokenAuth(secured).identify([f"Bearer {AGENT_TOKEN}".encode()])
    assert caller is not None and caller.agent == "claude-code"
    # Every configured token is compared, even after the first match.
    assert len(compared) == 2


async def test_agent_tokens_alone_turn_auth_on(make_settings: SettingsFactory) -> None:
    inner = InnerApp()
    guard = EdgeGuard(inner, make_settings(agent_tokens={AGENT_TOKEN: "codex"}))
    assert status_of(await call(guard, host())) == 401
    assert status_of(await call(guard, host({"authorization": f"Bearer {AGENT_TOKEN}"}))) == 200
    assert inner.scopes[0]["state"]["agent"] == "codex"


async def test_an_empty_configured_token_fails_closed(make_settings: SettingsFactory) -> None:
    inner = InnerApp()
    # Settings refuse a blank token; the guard still fails closed if one slips through unvalidated.
    guard = EdgeGuard(inner, make_settings().model_copy(update={"token": SecretStr("")}))
    assert status_of(await call(guard, host({"authorization": "Bearer "}))) == 401
    assert status_of(await call(guard, host())) == 401


async def test_without_a_token_everything_passes_and_agent_is_none(settings: Settings) -> None:
    inner = InnerApp()
    assert status_of(await call(EdgeGuard(inner, settings), host())) == 200
    assert inner.scopes[0]["state"]["agent"] is None


async def test_sane_request_id_is_kept_in_state_contextvar_and_response(settings: Settings) -> None:
    inner = InnerApp()
    sent = await call(EdgeGuard(inner, settings), host({"x-request-id": "trace-42.a_b"}))
    assert headers_of(sent)[b"x-request-id"] == b"trace-42.a_b"
    assert inner.scopes[0]["state"]["request_id"] == "trace-42.a_b"
    assert inner.request_ids == ["trace-42.a_b"]
    assert request_id_var.get() is None  # reset after the request


@pytest.mark.parametrize("incoming", [None, "", "x" * 65, "has space", "bad\\slash", "ünï", "a;b=c"])
async def test_odd_request_ids_are_replaced_by_a_fresh_uuid(settings: Settings, incoming: str | None) -> None:
    inner = InnerApp()
    extra = {} if incoming is None else {"x-request-id": incoming}
    sent = await call(EdgeGuard(inner, settings), host(extra))
    echoed = headers_of(sent)[b"x-request-id"].decode()
    assert len(echoed) == 32 and int(echoed, 16) >= 0
    assert inner.scopes[0]["state"]["request_id"] == echoed


async def test_rejections_carry_the_request_id_too(settings: Settings) -> None:
    sent = await call(EdgeGuard(InnerApp(), settings), {"host": "evil.example", "x-request-id": "r-1"})
    assert status_of(sent) == 421 and headers_of(sent)[b"x-request-id"] == b"r-1"


async def test_missing_and_duplicate_host_headers_are_421(settings: Settings) -> None:
    inner = InnerApp()
    guard = EdgeGuard(inner, settings)
    assert status_of(await call(guard, [("accept", "*/*")])) == 421
    assert status_of(await call(guard, [("host", "localhost"), ("host", "evil.example")])) == 421
    assert inner.scopes == []


async def test_two_origin_headers_are_refused(settings: Settings) -> None:
    pairs = [("host", "localhost"), ("origin", "http://localhost"), ("origin", "http://evil.example")]
    sent = await call(EdgeGuard(InnerApp(), settings), pairs)
    assert status_of(sent) == 403 and json_of(sent)["code"] == "forbidden_origin"


async def test_declared_oversized_body_is_413_before_the_app_reads_anything(settings: Settings) -> None:
    inner = InnerApp()
    sent = await call(EdgeGuard(inner, settings), host({"content-length": str(2 * 1024 * 1024)}), method="POST")
    assert status_of(sent) == 413 and json_of(sent)["code"] == "payload_too_large"
    assert inner.scopes == []


async def test_streamed_body_over_the_limit_is_cut_and_the_apps_reaction_replaced_by_413(
    make_settings: SettingsFactory,
) -> None:
    settings = make_settings(max_body_bytes=4096)
    inner = InnerApp()
    sent = await call(EdgeGuard(inner, settings), host(), method="POST", body=[b"x" * 3000, b"x" * 3000, b"x"])
    assert status_of(sent) == 413
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert len(inner.scopes) == 1  # the app ran, but its response never went out


async def test_body_exactly_at_the_limit_passes(make_settings: SettingsFactory) -> None:
    settings = make_settings(max_body_bytes=4096)
    sent = await call(EdgeGuard(InnerApp(), settings), host(), method="POST", body=[b"x" * 4000, b"x" * 96])
    assert status_of(sent) == 200


async def test_rejected_websocket_gets_a_json_denial_response(secured: Settings) -> None:
    inner = InnerApp()
    sent = await call(
        EdgeGuard(inner, secured), host(), scope_type="websocket", extensions={"websocket.http.response": {}}
    )
    assert status_of(sent) == 401 and json_of(sent)["code"] == "unauthorized"
    assert inner.scopes == []


async def test_rejected_websocket_without_denial_support_is_closed_as_policy_violation(settings: Settings) -> None:
    inner = InnerApp()
    sent = await call(EdgeGuard(inner, settings), {"host": "evil.example"}, scope_type="websocket")
    assert sent == [{"type": "websocket.close", "code": 1008}]
    assert inner.scopes == []


async def test_allowed_websocket_reaches_the_app_with_state(secured: Settings) -> None:
    inner = InnerApp()
    headers = host({"authorization": f"Bearer {AGENT_TOKEN}", "origin": "http://localhost:3002"})
    await call(EdgeGuard(inner, secured), headers, scope_type="websocket")
    assert inner.scopes[0]["state"]["agent"] == "claude-code"


async def test_cors_headers_from_the_app_never_go_out(settings: Settings) -> None:
    async def permissive(scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(b"access-control-allow-origin", b"*"), (b"x-request-id", b"app-made"), (b"vary", b"Accept")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b""})

    sent = await call(EdgeGuard(permissive, settings), host({"origin": "http://localhost:3002", "x-request-id": "r9"}))
    names = [name for name, _ in sent[0]["headers"]]
    assert b"access-control-allow-origin" not in names
    assert names.count(b"x-request-id") == 1 and headers_of(sent)[b"x-request-id"] == b"r9"
    assert (b"vary", b"Accept") in sent[0]["headers"]


async def test_a_refused_request_body_is_read_and_dropped_first_so_the_client_sees_the_answer(
    secured: Settings,
) -> None:
    consumed: list[bytes] = []
    chunks = [b"a" * 1000, b"b" * 1000, b"c"]

    async def receive() -> Message:
        consumed.append(chunks.pop(0))
        return {"type": "http.request", "body": consumed[-1], "more_body": bool(chunks)}

    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    scope: Scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": [(b"host", b"localhost")]}
    await EdgeGuard(InnerApp(), secured)(scope, receive, send)
    assert status_of(sent) == 401
    assert chunks == [] and len(consumed) == 3
