"""Rejections the guard answers itself: JSON ``{detail, code}``, for HTTP and WebSocket scopes."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from starlette.types import Scope, Send

Header = tuple[bytes, bytes]
# RFC 6455 "policy violation": uvicorn turns a close before accept into an HTTP 403.
_WS_POLICY_VIOLATION = 1008


@dataclass(frozen=True)
class Rejection:
    status: int
    code: str
    detail: str
    headers: list[Header] = field(default_factory=list)


MISDIRECTED_HOST = Rejection(
    421,
    "misdirected_host",
    "this server does not answer for that Host (allowed: loopback and MEMORY_MCP_ALLOWED_HOSTS)",
)
FORBIDDEN_ORIGIN = Rejection(
    403, "forbidden_origin", "cross-origin requests are refused (allowed: loopback and MEMORY_MCP_ALLOWED_ORIGINS)"
)
UNAUTHORIZED = Rejection(
    401,
    "unauthorized",
    "missing or invalid bearer token: send 'Authorization: Bearer <MEMORY_MCP_TOKEN>'",
    [(b"www-authenticate", b"Bearer")],
)


def payload_too_large(limit: int) -> Rejection:
    return Rejection(413, "payload_too_large", f"request body larger than {limit} bytes (MEMORY_MCP_MAX_BODY_BYTES)")


async def send_rejection(scope: Scope, send: Send, rejection: Rejection) -> None:
    """Answer with the rejection; a WebSocket gets a denial response when the server supports it."""
    body = json.dumps({"detail": rejection.detail, "code": rejection.code}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *rejection.headers,
    ]
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": rejection.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
    elif "websocket.http.response" in scope.get("extensions", {}):
        await send({"type": "websocket.http.response.start", "status": rejection.status, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
    else:
        await send({"type": "websocket.close", "code": _WS_POLICY_VIOLATION})


async def send_preflight(send: Send, headers: list[Header]) -> None:
    await send({"type": "http.response.start", "status": 204, "headers": headers})
    await send({"type": "http.response.body", "body": b""})
