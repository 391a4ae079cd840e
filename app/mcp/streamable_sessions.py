"""Streamable HTTP (``/mcp``) in front of the SDK's session manager: sessions are leases of a credential.

The SDK caps sessions globally and refuses the next client with 503, so 64 sessions one token
abandoned locked every other token out for the idle timeout. Here each credential holds at most
``per_owner`` sessions (``app/edge/leases.py``); an idle one is ended (never-used ones first; a
``DELETE`` through the SDK's own handler, as a client would) to admit its next one. A request naming
another credential's session gets a JSON 404, as if it did not exist.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.types import Message, Receive, Scope, Send

from app.edge.leases import ANONYMOUS_OWNER, LeaseTable
from app.errors import Unavailable
from app.mcp.caller import bind_principal, principal
from app.mcp.wire import error

logger = logging.getLogger(__name__)

SESSION_HEADER = b"mcp-session-id"
CALL_SNIFF_BYTES = 64 * 1024  # a body is read this far to tell a call from a notification


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key.lower() == name:
            return str(value.decode("latin-1"))
    return None


class StreamableSessions:
    """The ``/mcp`` endpoint: the SDK manager behind the per-credential session limit."""

    def __init__(self, manager: StreamableHTTPSessionManager, *, per_owner: int, total: int) -> None:
        self._manager = manager
        self.leases = LeaseTable("sessions", per_owner=per_owner, total=total)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope = bind_principal(scope)
        owner = principal(scope) or ANONYMOUS_OWNER
        session_id = _header(scope, SESSION_HEADER)
        if session_id is None and scope["method"] == "POST" and not self._manager.stateless:
            await self._open(scope, owner, receive, send)
            return
        lease = self.leases.get(session_id) if session_id is not None else None
        if lease is not None and lease.owner != owner:
            await error(404, "session_not_found", "unknown or closed session; initialize a new one")(
                scope, receive, send
            )
            return
        status: list[int] = []

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
            await send(message)

        if lease is not None and scope["method"] == "POST":
            receive = _CallWatch(receive, lambda: self.leases.record_call(session_id))
        with self.leases.in_use(session_id, call=False):
            await self._manager.handle_request(scope, receive, watch)
        if session_id is not None and (scope["method"] == "DELETE" or status[:1] == [404]):
            self.leases.release(session_id)  # ended by its client, or by the SDK's idle timeout

    async def _open(self, scope: Scope, owner: str, receive: Receive, send: Send) -> None:
        """A request without a session id (an initialize): make room, then lease the session it opens."""
        try:
            victims = self.leases.make_room(owner)
        except Unavailable as exc:
            headers = {"Retry-After": str(round(exc.retry_after_s or 5))}
            await error(503, exc.code, exc.message, headers)(scope, receive, send)
            return
        for victim in victims:
            await self._end(victim.key, victim.evict)

        async def lease_opened(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] < 400:
                opened = _header({"headers": message.get("headers", [])}, SESSION_HEADER)
                if opened is not None:
                    self.leases.admit(opened, owner, lambda: _closing_scope(scope, opened))
            await send(message)

        await self._manager.handle_request(scope, receive, lease_opened)

    async def _end(self, session_id: object, scope_of_delete: Any) -> None:
        """End an evicted session through the SDK's DELETE handler, so it is torn down as the SDK does."""
        delete_scope: Scope = scope_of_delete()
        sent = False

        async def receive() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": b"", "more_body": False}
            return {"type": "http.disconnect"}

        async def discard(_: Message) -> None:
            return None

        await self._manager.handle_request(delete_scope, receive, discard)
        logger.debug("evicted Streamable HTTP session %s", str(session_id)[:8])


class _CallWatch:
    """A ``receive`` that reports a call once the body it passed on holds a JSON-RPC request or response.

    Notifications (``notifications/initialized`` among them) are not calls: a session that only finished
    its handshake is one its client may have abandoned, and it gives way first (``app/edge/leases.py``).
    """

    def __init__(self, receive: Receive, on_call: Callable[[], None]) -> None:
        self._receive = receive
        self._on_call = on_call
        self._body = bytearray()
        self._done = False

    async def __call__(self) -> Message:
        message = await self._receive()
        if not self._done and message["type"] == "http.request":
            self._body += message.get("body", b"")[: CALL_SNIFF_BYTES + 1 - len(self._body)]
            if not message.get("more_body", False) or len(self._body) > CALL_SNIFF_BYTES:
                self._done = True
                if _holds_call(bytes(self._body)):
                    self._on_call()
        return message


def _holds_call(body: bytes) -> bool:
    if len(body) > CALL_SNIFF_BYTES:
        return True  # only a call carries that much
    try:
        parsed = json.loads(body)
    except ValueError:
        return False
    messages = parsed if isinstance(parsed, list) else [parsed]
    return any(isinstance(message, dict) and "id" in message for message in messages)


def _closing_scope(opening: Scope, session_id: str) -> Scope:
    """A ``DELETE`` for ``session_id`` with the opening request's credential, Host and Origin."""
    kept = [(name, value) for name, value in opening["headers"]
            if name.lower() not in (b"content-length", b"content-type", b"accept", SESSION_HEADER)]
    return {**opening, "method": "DELETE", "query_string": b"",
            "headers": [*kept, (SESSION_HEADER, session_id.encode("latin-1"))]}
