"""Legacy HTTP+SSE (``GET /mcp/sse`` + ``POST /mcp/message``) in the wire format existing clients expect.

The SDK's ``SseServerTransport`` does the protocol work; this wrapper rewrites only the wire format
around it, which is the least fragile way to serve clients written against the TypeScript SDK:

* endpoint event: the SDK sends ``<path>?session_id=<32 hex>``; clients split on ``sessionId=`` and
  expect a UUID with dashes, so the event is rewritten to ``<path>?sessionId=<uuid>``, in one of two forms
  (see :func:`endpoint_form`): the plain path the MCP SDKs read, or ``{"uri": "<path>?sessionId=<uuid>"}``
  for the raw client of the project's specification, which reads ``json.loads(data)["uri"]``;
* ``POST /mcp/message``: ``sessionId``/``session_id``, dashed or hex, are all mapped back to the
  SDK's ``session_id=<hex>`` before the SDK sees the request;
* unknown or foreign session → 404 JSON, empty id → 400 JSON (the SDK answers in plain text);
* a session whose stream closed in the last 10 minutes → the message is answered in the response body:
  python ``requests`` closes the stream as soon as a loop over ``iter_lines()`` breaks, which is exactly
  what the specification's client does after reading the endpoint, before it POSTs its first call;
* a request on a session that never sent ``initialize`` (clients reconnecting) is preceded by an
  implicit ``initialize`` whose reply is kept off the stream;
* no session id at all → the message is answered in the response body by a stateless Streamable
  HTTP manager (what the original server did for curl-style agents).

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
from starlette.responses import JSONResponse
from starlette.types import Message, Receive, Scope, Send

from app.mcp.caller import bind_principal, principal
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


def _error(status: int, code: str, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"detail": detail, "code": code}, status_code=status, headers=headers)


@dataclass
class _Session:
    owner: str | None
    initialized: bool = False
    init_lock: anyio.Lock = field(default_factory=anyio.Lock)
    # The id of our implicit initialize; its reply is dropped from the stream.
    implicit_init_id: str = field(default_factory=lambda: f"memory-mcp-implicit-initialize-{uuid4().hex}")


class _BodyTooLarge(Exception):
    pass


async def _read_body(receive: Receive, limit: int) -> bytes:
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        body.extend(message.get("body", b""))
        if len(body) > limit:
            raise _BodyTooLarge
        if not message.get("more_body", False):
            break
    return bytes(body)


def _replay(body: bytes) -> Receive:
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


def _first_request(body: bytes) -> dict[str, Any] | None:
    """The JSON-RPC message if the body is one object, else None (the SDK reports parse errors)."""
    try:
        message = json.loads(body)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


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
    ) -> None:
        self._server = server
        self._endpoint_format: SseEndpointFormat = endpoint_format
        self._sdk = SseServerTransport(message_path, security_settings=security, max_request_body_size=max_body_bytes)
        self._one_shot = one_shot
        self._message_path = message_path
        self._max_streams = max_streams
        self._max_body_bytes = max_body_bytes
        self._open_streams = 0
        self._sessions: dict[UUID, _Session] = {}
        self._closed: OrderedDict[UUID, tuple[str | None, float]] = OrderedDict()  # id -> (owner, closed at)

    @property
    def open_streams(self) -> int:
        return self._open_streams

    async def handle_stream(self, scope: Scope, receive: Receive, send: Send) -> None:
        """``GET /mcp/sse``: open a session and serve it until the client or the server goes away."""
        if scope["method"] != "GET":
            await _error(405, "method_not_allowed", "use GET", {"Allow": "GET"})(scope, receive, send)
            return
        if self._open_streams >= self._max_streams:
            await _error(503, "too_many_sessions", "Too many open sessions")(scope, receive, send)
            return
        self._open_streams += 1
        owner = principal(scope)
        form = endpoint_form(scope["headers"], self._endpoint_format)
        stream = _StreamRewriter(send, self, owner, form)
        try:
            async with self._sdk.connect_sse(bind_principal(scope), receive, stream.send) as (read, write):
                await self._server.run(read, write, self._server.create_initialization_options())
        except ValueError:
            # connect_sse answers a failed Host/Origin check itself, then raises; anything else is a bug.
            if stream.status is None or stream.status < 400:
                raise
        finally:
            self._open_streams -= 1
            if stream.session_id is not None:
                self._retire(stream.session_id, owner)

    def register_session(self, session_id: UUID, owner: str | None) -> _Session:
        session = _Session(owner=owner)
        self._sessions[session_id] = session
        return session

    def _retire(self, session_id: UUID, owner: str | None) -> None:
        """Forget an open session but remember for a while that it existed, and whose it was."""
        self._sessions.pop(session_id, None)
        now = time.monotonic()
        self._closed[session_id] = (owner, now)
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
            await _error(405, "method_not_allowed", "use POST", {"Allow": "POST"})(scope, receive, send)
            return
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        raw_ids = query.get("sessionId") or query.get("session_id")
        if raw_ids is None:
            await self._answer_in_body(scope, receive, send)
            return
        raw_id = raw_ids[0].strip()
        if not raw_id:
            await _error(400, "missing_session_id", "sessionId is empty; use the endpoint from GET /mcp/sse")(
                scope, receive, send
            )
            return
        session_id, session = self._lookup(raw_id, scope)
        if session_id is not None and session is None and self._closed_recently(session_id, scope):
            logger.debug("legacy SSE message for a closed stream: answered in the response body")
            await self._answer_in_body(scope, receive, send)
            return
        if session_id is None or session is None:
            detail = "unknown or closed session; open GET /mcp/sse again and use the new endpoint"
            await _error(404, "session_not_found", detail)(scope, receive, send)
            return
        try:
            body = await _read_body(receive, self._max_body_bytes)
        except _BodyTooLarge:
            await _error(413, "payload_too_large", f"body over {self._max_body_bytes} bytes")(scope, receive, send)
            return
        sdk_scope = {
            **bind_principal(scope),
            "path": self._message_path,
            "raw_path": self._message_path.encode("ascii"),
            "query_string": f"session_id={session_id.hex}".encode("ascii"),
        }
        started: list[bool] = []

        async def tracked_send(message: Message) -> None:
            started.append(True)
            await send(message)

        try:
            await self._ensure_initialized(session, sdk_scope, _first_request(body))
            await self._sdk.handle_post_message(sdk_scope, _replay(body), tracked_send)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            # The stream closed while this message was on its way: answer in the body if nothing was sent
            # yet; after the SDK's 202 the reply has nowhere to go, like any reply to a closed stream.
            logger.debug("legacy SSE message raced its stream's close (response started: %s)", bool(started))
            if not started:
                await self._answer_in_body(scope, _replay(body), send)

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
            await self._sdk.handle_post_message(sdk_scope, _replay(json.dumps(implicit).encode()), record)
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
        self, send: Send, transport: LegacySseTransport, owner: str | None, form: Literal["path", "json"]
    ) -> None:
        self._send = send
        self._form: Literal["path", "json"] = form
        self._transport = transport
        self._owner = owner
        self._session: _Session | None = None
        self._drop_marker = b""
        self.status: int | None = None
        self.session_id: UUID | None = None

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
        elif message["type"] == "http.response.body" and self.status == 200:
            body: bytes = message.get("body", b"")
            if self._session is None and body:
                self.session_id, body = _rewrite_endpoint(body, self._form)
                self._session = self._transport.register_session(self.session_id, self._owner)
                self._drop_marker = json.dumps(self._session.implicit_init_id).encode()
                message = {**message, "body": body}
            elif self._drop_marker and body.startswith(b"event: message") and self._drop_marker in body:
                return
        await self._send(message)
