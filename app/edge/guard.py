"""EdgeGuard: the one ASGI middleware in front of everything (REST, MCP transports, docs, dashboard).

Order per request: request id → Host allow-list (421) → Origin allow-list (403) → CORS preflight
(only for listed origins) → bearer token (401) → body-size limit (413) → the app. Every rejection is
answered here, as JSON ``{detail, code}``, and never reaches a route. Lifespan passes straight through.
"""

from __future__ import annotations

import logging
from collections import defaultdict

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.edge.auth import ANONYMOUS, Caller, TokenAuth
from app.edge.body_limit import DRAIN_CAP_BYTES, call_with_body_limit, declared_too_large, drain_body
from app.edge.cors import CorsPolicy, is_preflight
from app.edge.hosts import HostPolicy
from app.edge.origins import OriginPolicy, is_cross_site_without_origin, parse_origin_list
from app.edge.request_id import HEADER as REQUEST_ID_HEADER
from app.edge.request_id import pick_request_id
from app.edge.responses import (
    FORBIDDEN_ORIGIN,
    MISDIRECTED_HOST,
    UNAUTHORIZED,
    Header,
    Rejection,
    payload_too_large,
    send_preflight,
    send_rejection,
)
from app.logging_setup import request_id_var
from app.settings import LOOPBACK_HOSTS, Settings

logger = logging.getLogger(__name__)

RawHeaders = dict[bytes, list[bytes]]


def _collect_headers(scope: Scope) -> RawHeaders:
    headers: RawHeaders = defaultdict(list)
    for name, value in scope.get("headers", []):
        headers[name.lower()].append(value)
    return headers


def _single(headers: RawHeaders, name: bytes) -> str | None:
    """The header's value when it occurs exactly once; a repeated security header counts as bad."""
    values = headers.get(name, [])
    return values[0].decode("latin-1") if len(values) == 1 else None


_START_MESSAGES = ("http.response.start", "websocket.http.response.start", "websocket.accept")


def _with_headers(send: Send, extra: list[Header]) -> Send:
    """Add ``extra`` to whatever response starts (the app's or ours), HTTP or WebSocket."""

    async def send_with_headers(message: Message) -> None:
        if message["type"] in _START_MESSAGES:
            message = {**message, "headers": [*message.get("headers", []), *extra]}
        await send(message)

    return send_with_headers


def _guard_owned(name: bytes) -> bool:
    lowered = name.lower()
    return lowered == REQUEST_ID_HEADER or lowered.startswith(b"access-control-")


def _without_app_owned_headers(send: Send) -> Send:
    """CORS and the request id are the guard's alone: an app's copy (say a stray ``*``) never goes out."""

    async def send_filtered(message: Message) -> None:
        if message["type"] in _START_MESSAGES:
            kept = [(name, value) for name, value in message.get("headers", []) if not _guard_owned(name)]
            message = {**message, "headers": kept}
        await send(message)

    return send_filtered


class EdgeGuard:
    """Pure ASGI middleware; ``app.add_middleware(EdgeGuard, settings=settings)``."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        bind_host = None if settings.host in LOOPBACK_HOSTS else settings.host
        self.hosts = HostPolicy(settings.allowed_hosts, bind_host=bind_host)
        allowed_origins = parse_origin_list(settings.allowed_origins, "MEMORY_MCP_ALLOWED_ORIGINS")
        self.cors = CorsPolicy(settings.cors_origins)
        allowed_origins |= parse_origin_list(settings.cors_origins, "MEMORY_MCP_CORS_ORIGINS")
        self.origins = OriginPolicy(allowed_origins)
        self.auth = TokenAuth(settings)
        self.max_body_bytes = settings.max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = _collect_headers(scope)
        request_id = pick_request_id(headers.get(REQUEST_ID_HEADER, []))
        reset_token = request_id_var.set(request_id)
        try:
            extra = [(REQUEST_ID_HEADER, request_id.encode())]
            if scope["type"] == "http":
                extra += self.cors.response_headers(_single(headers, b"origin"))
            await self._guard(scope, receive, _with_headers(send, extra), headers, request_id)
        finally:
            request_id_var.reset(reset_token)

    async def _guard(self, scope: Scope, receive: Receive, send: Send, headers: RawHeaders, request_id: str) -> None:
        rejection = self._check_host_and_origin(scope, headers)
        if rejection is None and self._is_listed_preflight(scope, headers):
            await send_preflight(send, self.cors.preflight_headers())
            return
        caller = ANONYMOUS
        if rejection is None:
            identified = self._identify(scope, headers)
            rejection = UNAUTHORIZED if identified is None else None
            caller = identified or ANONYMOUS
        content_length = headers.get(b"content-length", [])
        if rejection is None and scope["type"] == "http" and declared_too_large(content_length, self.max_body_bytes):
            rejection = payload_too_large(self.max_body_bytes)
        if rejection is not None:
            _log_rejection(scope, rejection, headers)
            if scope["type"] == "http" and not declared_too_large(content_length, DRAIN_CAP_BYTES):
                await drain_body(receive, expects_continue=_single(headers, b"expect") == "100-continue")
            await send_rejection(scope, send, rejection)
            return
        state = scope.setdefault("state", {})
        state.update(request_id=request_id, agent=caller.agent, token_id=caller.token_id,
                     permissions=caller.permissions)
        app_send = _without_app_owned_headers(send)
        if scope["type"] == "http":
            await call_with_body_limit(self.app, scope, receive, app_send, self.max_body_bytes)
        else:
            await self.app(scope, receive, app_send)

    def _check_host_and_origin(self, scope: Scope, headers: RawHeaders) -> Rejection | None:
        if not self.hosts.allows(_single(headers, b"host")):
            return MISDIRECTED_HOST
        origins = headers.get(b"origin", [])
        if origins:
            origin = _single(headers, b"origin")
            return None if origin is not None and self.origins.allows(origin) else FORBIDDEN_ORIGIN
        method = scope.get("method", "GET")
        fetch_site, fetch_mode = _single(headers, b"sec-fetch-site"), _single(headers, b"sec-fetch-mode")
        return FORBIDDEN_ORIGIN if is_cross_site_without_origin(method, fetch_site, fetch_mode) else None

    def _is_listed_preflight(self, scope: Scope, headers: RawHeaders) -> bool:
        # Browsers never attach credentials to a preflight, so it is answered before the token check.
        origin = _single(headers, b"origin")
        method = scope.get("method", "")
        requested = _single(headers, b"access-control-request-method")
        return is_preflight(method, origin, requested) and self.cors.listed(origin)

    def _identify(self, scope: Scope, headers: RawHeaders) -> Caller | None:
        """The caller, ANONYMOUS on open routes, None when a token is required and not proven."""
        if self.auth.is_open(scope.get("path", "")):
            return ANONYMOUS
        # Only the header counts: a token in the query string would end up in logs and browser history.
        return self.auth.identify(headers.get(b"authorization", []))


def _log_rejection(scope: Scope, rejection: Rejection, headers: RawHeaders) -> None:
    """One line per refusal; attacker-controlled text is repr'd and cut, tokens are never logged."""
    client = scope.get("client") or ("?", 0)
    host = headers.get(b"host", [b""])[0][:100]
    level = logging.WARNING if rejection.status in (403, 421) else logging.INFO
    logger.log(
        level,
        "edge refused %s %s: %d %s (client=%s host=%r)",
        scope.get("method", "WS"),
        str(scope.get("path", ""))[:200],
        rejection.status,
        rejection.code,
        client[0],
        host.decode("latin-1"),
    )
