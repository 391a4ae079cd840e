"""Small ASGI pieces of the legacy SSE transport: JSON errors, a bounded body read, and its replay."""

from __future__ import annotations

import json
from typing import Any

import anyio
from starlette.responses import JSONResponse
from starlette.types import Message, Receive, Scope


def error(status: int, code: str, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"detail": detail, "code": code}, status_code=status, headers=headers)


class BodyTooLarge(Exception):
    pass


class InvalidJson(Exception):
    """The body is no JSON at all, or nested deeper than the parser's recursion limit."""


async def read_body(receive: Receive, limit: int) -> bytes:
    """The whole request body.

    Raises:
        BodyTooLarge: it passed ``limit`` bytes.
    """
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        body.extend(message.get("body", b""))
        if len(body) > limit:
            raise BodyTooLarge
        if not message.get("more_body", False):
            break
    return bytes(body)


def replay(body: bytes) -> Receive:
    """A receive callable that hands the already-read body to the SDK once, then waits like a real one."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await anyio.sleep_forever()
        raise AssertionError("unreachable")  # pragma: no cover

    return receive


def parse_message(body: bytes) -> dict[str, Any] | None:
    """The JSON-RPC message if the body is one object, None for other JSON (the SDK reports those).

    Raises:
        InvalidJson: not JSON, or nested too deeply to parse (a RecursionError would be a 500).
    """
    try:
        message = json.loads(body)
    except (ValueError, RecursionError) as exc:
        detail = "JSON nested too deeply" if isinstance(exc, RecursionError) else f"not valid JSON: {exc}"
        raise InvalidJson(detail) from None
    return message if isinstance(message, dict) else None


def media_ranges(scope: Scope) -> set[str]:
    """The media ranges of every Accept header, lower-cased, parameters (``q``) dropped."""
    accept = b",".join(value for name, value in scope["headers"] if name.lower() == b"accept").decode("latin-1")
    return {media_range.split(";", 1)[0].strip().lower() for media_range in accept.split(",")}
