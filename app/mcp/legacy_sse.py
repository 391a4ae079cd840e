"""Legacy HTTP+SSE (``GET /mcp/sse`` + ``POST /mcp/message``) in the wire format existing clients expect.

The SDK's ``SseServerTransport`` does the protocol work; this wrapper rewrites only the wire format
around it, which is the least fragile way to serve clients written against the TypeScript SDK:

* endpoint event: the SDK sends ``<path>?session_id=<32 hex>``; clients split on ``sessionId=`` and
  expect a UUID with dashes, so the event is rewritten to ``<path>?sessionId=<uuid>``, in one of two forms
  (see :func:`endpoint_form`): the plain path the MCP SDKs read, or ``{"uri": "<path>?sessionId=<uuid>"}``
  for the raw client of the project's specification, which reads ``json.loads(data)["uri"]``;
* ``POST /mcp/message``: ``sessionId``/``session_id``, dashed or hex, are all mapped back to the
  SDK's ``session_id=<hex>`` before the SDK sees the request;
* every accepted POST on a live session is ``202 Accepted`` and its reply goes on that session's stream,
  whatever the Accept headers, as the 2024-11-05 transport says: Claude Code sends
  ``Accept: application/json, text/event-stream`` on its POSTs and reads replies only from the stream;
* unknown or foreign session → 404 JSON, a session whose stream has closed → 410 JSON naming it (no
  client of this transport reads a reply from a POST body), empty id → 400 JSON (the SDK answers in
  plain text);
* a 202 is sent only once the server loop has taken the message, and the loop's end waits for the
  requests it took (``app/mcp/draining.py``): an accepted call runs to completion, exactly once;
* sessions are leases of the credential that opened them (``app/edge/leases.py``);
* a request on a session that never sent ``initialize`` (clients reconnecting) is preceded by an
  implicit ``initialize`` whose reply is kept off the stream;
* no session id at all → the message is answered in the response body by a stateless Streamable
  HTTP manager: the opt-in one-shot form for curl-style scripts, chosen by leaving out ``sessionId``.

If an SDK upgrade changes the endpoint event, ``_rewrite_endpoint`` raises and the wire-format tests fail.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import parse_qs
from uuid import UUID, uuid4

import anyio
from mcp.server.lowlevel.server import Server
from mcp.server.sse import SseServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import LATEST_PROTOCOL_VERSION
from starlette.types import Message, Receive, Scope, Send

from app.edge.leases import ANONYMOUS_OWNER, Evictable, LeaseTable
from app.errors import Unavailable
from app.mcp.caller import bind_principal, principal
from app.mcp.draining import DrainingReadStream, InFlight, TolerantWriteStream
from app.mcp.wire import BodyTooLarge, InvalidJson, error, parse_message, read_body, replay
from app.settings import SseEndpointFormat

logger = logging.getLogger(__name__)

CLOSED_SESSION_MEMORY_S = 600.0  # like the Streamable HTTP idle timeout: a REPL user may POST minutes later
MAX_CLOSED_SESSIONS = 4096

_ENDPOINT_EVENT = re.compile(
    rb"^event: endpoint\r?\ndata: (?P<path>[^?\r\n]*)\?session_id=(?P<hex>[0-9a-f]{32})(?P<end>\r?\n\r?\n)$"
)


class WireFormatChanged(RuntimeError):
    """The SDK's endpoint event no longer looks like ``<path>?session_id=<hex>``: update the rewrite."""


def endpoint_form(headers: list[tuple[bytes, bytes]], setting: SseEndpointFormat) -> Literal["path", "json"]:
    """Which endpoint event a ``GET /mcp/sse`` gets: the setting, or under ``auto`` the request's Accept header.

    The rule under ``auto``: the plain path when any media range of the Accept header(s) is exactly
    ``text/event-stream`` (case-insensitive, parameters such as ``q`` ignored), otherwise the JSON form.
    The official SDK clients and the MCP Inspector send ``Accept: text/event-stream`` (Python's
    ``sse_client`` and the TypeScript ``SSEClientTransport`` alike, as any ``EventSource`` does), while
    python ``requests``, curl and httpx send ``*/*``: ``*/*`` or ``text/*`` do not count as naming it.
    """
    if setting != "auto":
        return setting
    accept = b",".join(value for name, value in headers if name.lower() == b"accept").decode("latin-1")
    ranges = (media_range.split(";", 1)[0].strip().lower() for media_range in accept.split(","))
    return "path" if "text/event-stream" in ranges else "json"


def _rewrite_endpoint(chunk: bytes, form: Literal["path", "json"] = "path") -> tuple[UUID, bytes]:
    """Turn the SDK's endpoint event into ``?sessionId=<uuid>``, as a plain path or as ``{"uri": …}``."""
    match = _ENDPOINT_EVENT.match(chunk)
    if match is None:
        raise WireFormatChanged(f"unexpected first SSE event from the SDK: {chunk[:120]!r}")
    session_id = UUID(hex=match["hex"].decode("ascii"))
    data = match["path"] + b"?sessionId=" + str(session_id).encode("ascii")
    if form == "json":
        data = json.dumps({"uri": data.decode("ascii")}).encode("ascii")
    return session_id, b"event: endpoint\r\ndata: " + data + match["end"]


@dataclass
class _Session:
    owner: str | None
    lease_key: object
    initialized: bool = False
    init_lock: anyio.Lock = field(default_factory=anyio.Lock)
    # The id of our implicit initialize; its reply is dropped from the stream.
    implicit_init_id: str = field(default_factory=lambda: f"memory-mcp-implicit-initialize-{uuid4().hex}")


class LegacySseTransport:
    """The two ASGI endpoints of the legacy transport, sharing one SDK ``SseServerTransport``."""

    def __init__(
        self,
        server: Server[Any],
        security: TransportSecuritySettings,
        one_shot: StreamableHTTPSessionManager,
        *,
        message_path: str,
        max_streams: int,
        max_body_bytes: int,
        endpoint_format: SseEndpointFormat = "auto",
        max_streams_total: int | None = None,
    ) -> None:
        self._server = server
        self._endpoint_format: SseEndpointFormat = endpoint_format
        self._sdk = SseServerTransport(message_path, security_settings=security, max_request_body_size=max_body_bytes)
        self._one_shot = one_shot
        self._message_path = message_path
        self._max_body_bytes = max_body_bytes
        self.leases = LeaseTable("sessions", per_owner=max_streams, total=max_streams_total or 16 * max_streams)
        self._sessions: dict[UUID, _Session] = {}
        self._closed: OrderedDict[UUID, tuple[str | None, float]] = OrderedDict()  # id -> (owner, closed at)

    @property
    def open_streams(self) -> int:
        return len(self.leases)

    async def handle_stream(self, scope: Scope, receive: Receive, send: Send) -> None:
        """``GET /mcp/sse``: open a session and serve it until the client or the server goes away."""
        if scope["method"] != "GET":
            await error(405, "method_not_allowed", "use GET", {"Allow": "GET"})(scope, receive, send)
            return
        owner = principal(scope)
        lease_key, client = object(), Evictable(receive)
        try:
            lease = self.leases.admit(lease_key, owner or ANONYMOUS_OWNER, client.evict)
        except Unavailable as exc:
            headers = {"Retry-After": str(round(exc.retry_after_s or 5))}
            await error(503, exc.code, exc.message, headers)(scope, receive, send)
            return
        form = endpoint_form(scope["headers"], self._endpoint_format)
        session = _Session(owner, lease_key)
        stream = _StreamRewriter(send, self, session, form)
        in_flight = InFlight(lease.add_busy)
        try:
            async with self._sdk.connect_sse(bind_principal(scope), client.receive, stream.send) as (read, write):
                await self._server.run(
                    DrainingReadStream(read, in_flight),
                    TolerantWriteStream(write, in_flight),
                    self._server.create_initialization_options(),
                )
            if client.evicted and stream.status == 200:
                # Evicted for a newer session of the same credential: end the stream cleanly.
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except ValueError:
            # connect_sse answers a failed Host/Origin check itself, then raises; anything else is a bug.
            if stream.status is None or stream.status < 400:
                raise
        finally:
            self.leases.release(lease_key)
            if stream.session_id is not None:
                self._retire(stream.session_id, owner)

    def register_session(self, session_id: UUID, session: _Session) -> None:
        self._sessions[session_id] = session

    def _retire(self, session_id: UUID, owner: str | None) -> None:
        """Forget an open session but remember for a while that it existed, and whose it was (from the first
        sign of its close: a message that found the stream gone may retire it before the stream's handler)."""
        self._sessions.pop(session_id, None)
        now = time.monotonic()
        self._closed.setdefault(session_id, (owner, now))
        while self._closed:
            _, (_, closed_at) = next(iter(self._closed.items()))
            if len(self._closed) <= MAX_CLOSED_SESSIONS and now - closed_at <= CLOSED_SESSION_MEMORY_S:
                break
            self._closed.popitem(last=False)

    def _closed_recently(self, session_id: UUID, scope: Scope) -> bool:
        entry = self._closed.get(session_id)
        if entry is None:
            return False
        owner, closed_at = entry
        return owner == principal(scope) and time.monotonic() - closed_at <= CLOSED_SESSION_MEMORY_S

    async def handle_message(self, scope: Scope, receive: Receive, send: Send) -> None:
        """``POST /mcp/message``: route a client message to its session's stream, or answer it in the body."""
        if scope["method"] != "POST":
            await error(405, "method_not_allowed", "use POST", {"Allow": "POST"})(scope, receive, send)
            return
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        raw_ids = query.get("sessionId") or query.get("session_id")
        session_id: UUID | None = None
        session: _Session | None = None
        if raw_ids is not None:
            raw_id = raw_ids[0].strip()
            if not raw_id:
                detail = "sessionId is empty; use the endpoint from GET /mcp/sse"
                await error(400, "missing_session_id", detail)(scope, receive, send)
                return
            session_id, session = self._lookup(raw_id, scope)
            if session is None:
                await self._refuse_unknown(session_id, raw_id, scope, receive, send)
                return
        try:
            body = await read_body(receive, self._max_body_bytes)
            message = parse_message(body)
        except BodyTooLarge:
            await error(413, "payload_too_large", f"body over {self._max_body_bytes} bytes")(scope, receive, send)
            return
        except InvalidJson as exc:
            await error(400, "invalid_json", str(exc))(scope, receive, send)
            return
        if session is None or session_id is None:
            # No session id at all: the one-shot form, one exchange answered in the body.
            await self._answer_in_body(scope, replay(body), send)
            return
        with self.leases.in_use(session.lease_key):
            await self._deliver(session, session_id, scope, body, message, send)

    async def _refuse_unknown(
        self, session_id: UUID | None, raw_id: str, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """404 for a session never seen (or another credential's), 410 for one of ours whose stream has gone."""
        if session_id is not None and self._closed_recently(session_id, scope):
            detail = (f"session {session_id} is closed: its stream is gone, so no reply could reach you; "
                      "open GET /mcp/sse again and use the new endpoint")
            await error(410, "session_closed", detail)(scope, receive, send)
            return
        detail = f"unknown session {raw_id[:64]!r}; open GET /mcp/sse again and use the new endpoint"
        await error(404, "session_not_found", detail)(scope, receive, send)

    async def _deliver(
        self, session: _Session, session_id: UUID, scope: Scope, body: bytes, message: dict[str, Any] | None, send: Send
    ) -> None:
        """Hand the message to the session's server loop; 202 only once the loop has taken it."""
        sdk_scope = {
            **bind_principal(scope),
            "path": self._message_path,
            "raw_path": self._message_path.encode("ascii"),
            "query_string": f"session_id={session_id.hex}".encode("ascii"),
        }
        held: list[Message] = []

        async def hold(reply: Message) -> None:
            held.append(reply)

        try:
            await self._ensure_initialized(session, sdk_scope, message)
            await self._sdk.handle_post_message(sdk_scope, replay(body), hold)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            held = [{"type": "http.response.start", "status": 404}]  # the stream closed on the way
        status = held[0]["status"] if held else 500
        if status == 202:
            for reply in held:
                await send(reply)
        elif status == 404:
            # The stream closed between our lookup and the SDK's: nothing ran, and no reply could be read.
            logger.debug("legacy SSE message raced its stream's close: refused with 410")
            self._retire(session_id, principal(scope))
            await self._refuse_unknown(session_id, str(session_id), scope, replay(b""), send)
        else:
            text = b"".join(reply.get("body", b"") for reply in held[1:]).decode("utf-8", "replace")
            await error(status, "invalid_message", text or "the message was refused")(scope, replay(b""), send)

    def _lookup(self, raw_id: str, scope: Scope) -> tuple[UUID | None, _Session | None]:
        try:
            session_id = UUID(raw_id)  # dashed (TypeScript SDK) and 32-hex (Python SDK) both parse
        except ValueError:
            return None, None
        session = self._sessions.get(session_id)
        if session is None or session.owner != principal(scope):
            # Another credential's session is reported exactly like a missing one.
            return session_id, None
        return session_id, session

    async def _ensure_initialized(self, session: _Session, sdk_scope: Scope, message: dict[str, Any] | None) -> None:
        """Open the SDK's initialize gate for clients that call tools on a fresh session without a handshake."""
        if session.initialized or message is None:
            return
        if message.get("method") == "initialize":
            session.initialized = True
            return
        if "id" not in message or "method" not in message:
            return  # notifications and responses pass the gate untouched
        async with session.init_lock:
            if session.initialized:
                return
            implicit = {
                "jsonrpc": "2.0",
                "id": session.implicit_init_id,
                "method": "initialize",
                "params": {
                    "protocolVersion": LATEST_PROTOCOL_VERSION,
                    "capabilities": {},
                    "clientInfo": {"name": "memory-mcp-implicit-initialize", "version": "1"},
                },
            }
            status: list[int] = []

            async def record(message: Message) -> None:
                if message["type"] == "http.response.start":
                    status.append(message["status"])

            # The SDK handles initialize inline, so the client's request queued next sees an open gate.
            await self._sdk.handle_post_message(sdk_scope, replay(json.dumps(implicit).encode()), record)
            session.initialized = bool(status) and status[0] == 202
            logger.debug("implicit initialize on a legacy SSE session: status %s", status)

    async def _answer_in_body(self, scope: Scope, receive: Receive, send: Send) -> None:
        """No session at all: one JSON-RPC exchange answered in the response (stateless, like the original)."""
        headers = [(name, value) for name, value in scope["headers"] if name != b"accept"]
        headers.append((b"accept", b"application/json, text/event-stream"))
        await self._one_shot.handle_request({**scope, "headers": headers}, receive, send)


class _StreamRewriter:
    """The ``send`` of one SSE stream: rewrites the endpoint event and drops the implicit initialize reply."""

    def __init__(
        self, send: Send, transport: LegacySseTransport, session: _Session, form: Literal["path", "json"]
    ) -> None:
        self._send = send
        self._form: Literal["path", "json"] = form
        self._transport = transport
        self._session = session
        self._drop_marker = b""
        self.status: int | None = None
        self.session_id: UUID | None = None

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
        elif message["type"] == "http.response.body" and self.status == 200:
            body: bytes = message.get("body", b"")
            if self.session_id is None and body:
                self.session_id, body = _rewrite_endpoint(body, self._form)
                self._transport.register_session(self.session_id, self._session)
                self._drop_marker = json.dumps(self._session.implicit_init_id).encode()
                message = {**message, "body": body}
            elif self._drop_marker and body.startswith(b"event: message") and self._drop_marker in body:
                return
        await self._send(message)
