"""``GET /api/events``: a server-sent event stream that tells the dashboard when to look again.

The stream carries no memory or task data, only "this list changed", so it needs no rule beyond the
ones every API route has: the edge guard checks Host, Origin and the bearer token before it opens.
EventSource cannot send that header, so the page reads the stream with ``fetch``.

Changes are found by polling two markers that cost microseconds and see every writer, other
processes included (``app/changes.py``, shared with the MCP resource notifications). One reading serves
every open stream.

Wire format (``text/event-stream``)::

    event: ready      once on connect; the page reloads both lists (it may have missed changes)
    event: memories   the memory table has a new version
    event: board      the board's database saw a commit (tasks, notes, history or jobs)
    : keep-alive      a comment every 15 s, so idle proxies and the page's watchdog see a live line

Each ``data`` line is a JSON object of the markers; the page does not need them.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, Request
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from app.changes import ChangeMarkers, Markers
from app.container import Services
from app.edge.leases import ANONYMOUS_OWNER, Evictable, LeaseTable, credential_of
from app.errors import Unavailable

logger = logging.getLogger(__name__)

EVENTS_PATH = "/api/events"
KEEPALIVE_S = 15.0
MAX_STREAMS = 16  # per credential (a dashboard tab holds one); past it the credential's oldest stream ends
MAX_STREAMS_TOTAL = 64  # whatever the credentials (with no token, any Authorization header is one)
SEND_TIMEOUT_S = 10.0  # a page that stops reading loses its stream instead of holding a task forever


class ChangeFeed:
    """The change markers (shared with the MCP front end's notifications) and a bound on the streams."""

    def __init__(self, markers: ChangeMarkers, *, max_streams: int = MAX_STREAMS,
                 max_streams_total: int = MAX_STREAMS_TOTAL) -> None:
        self._markers = markers
        self.poll_interval_s = markers.poll_interval_s
        # A stream carries no requests, so it is always idle: the oldest of a credential gives way.
        self.streams = LeaseTable("streams", per_owner=max_streams, total=max_streams_total)

    async def markers(self) -> Markers:
        return await self._markers.markers()

    @property
    def open_streams(self) -> int:
        return len(self.streams)

    def admit(self, owner: str, receive: Receive) -> tuple[Evictable, Callable[[], None]]:
        """Take a stream slot for ``owner``, ending its oldest stream if it holds too many already.

        Returns the ``receive`` that ends the stream when it must give way, and the function that
        gives the slot back (once, however often it is called).
        """
        key, client = object(), Evictable(receive)
        self.streams.admit(key, owner, client.evict)
        return client, lambda: self.streams.release(key)

    async def events(self) -> AsyncIterator[ServerSentEvent]:
        """``ready`` with the markers at connect, then one event per marker each time it moves."""
        last = await self.markers()
        yield _event("ready", asdict(last))
        while True:
            await asyncio.sleep(self.poll_interval_s)
            now = await self.markers()
            if now.memories != last.memories:
                yield _event("memories", {"marker": now.memories})
            if now.board != last.board:
                yield _event("board", {"marker": now.board})
            last = now


def _event(name: str, data: dict[str, Any]) -> ServerSentEvent:
    return ServerSentEvent(json.dumps(data), event=name, sep="\n")


def _keepalive() -> ServerSentEvent:
    return ServerSentEvent(comment="keep-alive", sep="\n")


class _EventStream(EventSourceResponse):
    """sse-starlette's response (keep-alive, disconnect, and the end of the stream when uvicorn is told
    to stop, as for the MCP streams) that gives its feed slot back however the stream ends."""

    def __init__(self, content: AsyncIterator[ServerSentEvent], feed: ChangeFeed, owner: str) -> None:
        super().__init__(content, ping=KEEPALIVE_S, sep="\n", ping_message_factory=_keepalive,
                         send_timeout=SEND_TIMEOUT_S)
        self._feed, self._owner = feed, owner

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            client, release = self._feed.admit(self._owner, receive)
        except Unavailable as exc:  # only when every stream would have to be busy, which none ever is
            body = {"detail": exc.message, "code": exc.code}
            await JSONResponse(body, status_code=503, headers={"Retry-After": "5"})(scope, receive, send)
            return
        try:
            await super().__call__(scope, client.receive, send)
            if client.evicted:
                await send({"type": "http.response.body", "body": b"", "more_body": False})  # a clean end
        finally:
            release()


def router_for(services: Services, markers: ChangeMarkers | None = None) -> APIRouter:
    """The events route over one feed for this app's services (``markers``: shared with other readers)."""
    feed = ChangeFeed(markers or ChangeMarkers(services))
    router = APIRouter(include_in_schema=False)

    @router.get(EVENTS_PATH)
    async def events(request: Request) -> EventSourceResponse:
        """The dashboard's change stream (see the module docstring for the events)."""
        return _EventStream(feed.events(), feed, credential_of(request.scope) or ANONYMOUS_OWNER)

    return router
