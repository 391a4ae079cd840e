"""Request-body cap: refuse a large Content-Length up front, cut a streamed body as it passes the cap."""

from __future__ import annotations

import logging

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.edge.responses import payload_too_large, send_rejection

logger = logging.getLogger(__name__)


# Before any refusal the rest of the body is read and dropped, up to this much: a server that closes with
# unread data makes the kernel send a reset, and clients that asked for ``Connection: close`` (urllib does)
# would see "connection reset" instead of the 401/413. Past the cap the connection is simply closed.
DRAIN_CAP_BYTES = 16 * 1024 * 1024


class BodyTooLarge(Exception):
    """Raised from ``receive`` once the body passes the cap; the guard turns it into a 413."""


def declared_too_large(content_length: list[bytes], limit: int) -> bool:
    """True when a Content-Length announces more than ``limit`` (the HTTP parser already vetted it)."""
    return any(value.strip().isdigit() and int(value) > limit for value in content_length)


async def drain_body(receive: Receive, expects_continue: bool, cap: int = DRAIN_CAP_BYTES) -> None:
    """Read and drop what is left of the body (never stored); skipped when the client awaits 100-continue."""
    if expects_continue:
        return  # it has sent nothing yet and will read our 413 instead of sending
    drained = 0
    while drained <= cap:
        message = await receive()
        if message["type"] != "http.request":
            return
        drained += len(message.get("body", b""))
        if not message.get("more_body", False):
            return


async def call_with_body_limit(app: ASGIApp, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
    """Run ``app`` with a counting ``receive``; only counts, never buffers (responses are not limited)."""
    received = 0
    exceeded = False
    app_started = False

    async def counting_receive() -> Message:
        nonlocal received, exceeded
        if exceeded:
            raise BodyTooLarge
        message = await receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > limit:
                exceeded = True
                raise BodyTooLarge
        return message

    async def replaceable_send(message: Message) -> None:
        nonlocal app_started
        if exceeded and not app_started:
            return  # whatever the app makes of the cut body (a 400, a 500) is replaced by our 413
        if message["type"] == "http.response.start":
            app_started = True
        await send(message)

    try:
        await app(scope, counting_receive, replaceable_send)
    except Exception:
        # Any error after the cut is a consequence of it; before the cut it is the app's own.
        if not exceeded:
            raise
        if app_started:
            logger.info("request body passed %d bytes after the response had started; stream cut", limit)
            return
    if exceeded and not app_started:
        logger.info("request body cut at %d bytes: 413", limit)
        await drain_body(receive, expects_continue=False)  # the app's read already sent any 100-continue
        await send_rejection(scope, send, payload_too_large(limit))
