"""Live MCP: resource subscriptions, list changes and log notifications, whoever made the change.

Changes are found as the dashboard finds them (``app/changes.py``: the table's version and the board's
marker, which see other processes and instances too). When a marker moves, the watcher re-reads each
resource someone watches and compares a digest of its text, so ``notifications/resources/updated``
means the text a client would read is different; ``notifications/resources/list_changed`` follows
cards and memories appearing or going.

Two protocol eras, one watcher:

- handshake era (every client today: ``resources/subscribe``, ``logging/setLevel``): notifications go
  through the SDK's server session of the connection on its standing channel (the legacy SSE stream, or
  the GET stream of a Streamable HTTP session), so the transport does not matter. A connection without
  one (``/mcp`` in stateless mode, or a session-less POST to ``/mcp/message``) cannot be told anything
  later: its initialize result says ``subscribe: false, listChanged: false`` and ``resources/subscribe``
  is refused.
- 2026-07-28 (``subscriptions/listen``): the same events go to the SDK's subscription bus, which
  delivers them on each listen stream; that works in stateless mode too, since the stream is the answer.

Nothing is sent unasked: ``list_changed`` goes to a connection that listed the resources or subscribed,
log notifications (``notifications/message``) only at or above the level a connection set with
``logging/setLevel``. While no connection or listen stream wants anything, the watcher does not even read
the markers (on object storage each reading is a LIST request). Log notifications say what a person would
want to know: a job ended, the model and the vector index finished
loading, the embedding provider went away or came back. They carry ids and states, never a memory's
text, a job's arguments or output, nor any setting.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import Counter
from collections.abc import Iterable
from typing import Any

import anyio
from mcp.server.connection import Connection
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.session import ServerSession
from mcp.server.subscriptions import ResourcesListChanged, ResourceUpdated
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    EmptyResult,
    LoggingLevel,
    LoggingMessageNotification,
    LoggingMessageNotificationParams,
    ResourceListChangedNotification,
    ResourceUpdatedNotification,
    ResourceUpdatedNotificationParams,
    ServerNotification,
    SetLevelRequestParams,
    SubscribeRequestParams,
    UnsubscribeRequestParams,
)

from app.changes import ChangeMarkers, Markers
from app.container import Services
from app.errors import AppError, NotFound
from app.mcp import resources
from app.mcp.arguments import ToolServer
from app.mcp.listeners import (
    LEVELS,
    MAX_SUBSCRIPTIONS,
    ListenBus,
    Listener,
    connection_of,
    honest_capabilities,
    listen_uris,
    standing_channel,
)
from app.memory import listing

logger = logging.getLogger(__name__)

MAX_WATCHED = 4096  # distinct URIs, all connections and listen streams together
SEND_TIMEOUT_S = 5.0  # a client that stops reading its stream is dropped rather than stall the others
RECENT_JOBS = 20
MISSING = "missing"


class Live:
    """The middleware that meets every connection, the subscription methods, and the watcher task."""

    def __init__(self, services: Services, markers: ChangeMarkers, bus: ListenBus) -> None:
        self._services = services
        self._markers = markers
        self._bus = bus
        self._listeners: dict[Connection, Listener] = {}
        self._watched: Counter[str] = Counter()
        self._digests: dict[str, str | None] = {}
        self._task_ids: frozenset[str] | None = None
        self._memory_count: int | None = None
        self._jobs: dict[str, str] = {}
        self._embedder_ready: bool | None = None
        self._since_ms = time.time_ns() // 1_000_000
        self.seen: Markers | None = None  # the markers of the last round the watcher finished
        self._last: Markers | None = None
        self._awake = False

    @property
    def listeners(self) -> int:
        return len(self._listeners)

    @property
    def watched(self) -> set[str]:
        return set(self._watched)

    async def settled(self) -> bool:
        """Whether the watcher has handled every change made so far (its notifications are sent), or nobody
        wants to hear of any."""
        if not self._wanted():
            return True
        return self._awake and self.seen is not None and self.seen == await self._markers.fresh()

    def _wanted(self) -> bool:
        return bool(self._watched) or self._bus.listening > 0 or any(
            listener.interested for listener in self._listeners.values())

    async def _wake(self) -> None:
        """Start watching from the state of now, before answering the request that asked for it."""
        if self._awake:
            return
        self._awake = True
        now = await self._markers.fresh()
        await self._guarded(self._baseline)
        self._last = self.seen = now

    # --- every request passes here (a ServerMiddleware) ------------------------------------------

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        connection = connection_of(ctx.session)
        if standing_channel(connection):
            assert connection is not None  # noqa: S101 - standing_channel checked it
            listener = self._listener(connection, ctx.session)
            if ctx.method == "resources/list":
                listener.lists = True
                await self._wake()
        if ctx.method == "subscriptions/listen":
            uris = listen_uris(ctx.params)
            await self._wake()
            await self._watch(uris)
            try:
                return await call_next(ctx)
            finally:
                self._unwatch(uris)
        result = await call_next(ctx)
        if ctx.method == "initialize" and isinstance(result, dict):
            honest_capabilities(result, standing_channel(connection))
        return result

    def _listener(self, connection: Connection, session: ServerSession) -> Listener:
        listener = self._listeners.get(connection)
        if listener is None:
            listener = self._listeners[connection] = Listener(session)
            connection.exit_stack.callback(self._forget, connection)
        listener.session = session
        return listener

    def _forget(self, connection: Connection) -> None:
        listener = self._listeners.pop(connection, None)
        if listener is not None:
            self._unwatch(listener.uris)

    # --- resources/subscribe, resources/unsubscribe, logging/setLevel ------------------------------

    async def subscribe(self, ctx: ServerRequestContext[Any, Any], params: SubscribeRequestParams) -> EmptyResult:
        connection = connection_of(ctx.session)
        if connection is None or not standing_channel(connection):
            raise MCPError(INVALID_REQUEST, "subscriptions_unavailable: this connection has no stream the server "
                           "can write to later (Streamable HTTP in stateless mode, or a POST without a session): "
                           "use a stateful /mcp session, GET /mcp/sse, or subscriptions/listen")
        _check_uri(params.uri)
        listener = self._listener(connection, ctx.session)
        if params.uri not in listener.uris:
            if len(listener.uris) >= MAX_SUBSCRIPTIONS:
                raise MCPError(INVALID_PARAMS, f"too_many_subscriptions: at most {MAX_SUBSCRIPTIONS} a connection; "
                               "unsubscribe from some first")
            await self._wake()
            await self._watch([params.uri])
            listener.uris.add(params.uri)
        return EmptyResult()

    async def unsubscribe(self, ctx: ServerRequestContext[Any, Any], params: UnsubscribeRequestParams) -> EmptyResult:
        connection = connection_of(ctx.session)
        listener = self._listeners.get(connection) if connection is not None else None
        if listener is not None and params.uri in listener.uris:
            listener.uris.discard(params.uri)
            self._unwatch([params.uri])
        return EmptyResult()

    async def set_level(self, ctx: ServerRequestContext[Any, Any], params: SetLevelRequestParams) -> EmptyResult:
        """The least severe level this connection wants; accepted without effect where nothing can be sent."""
        connection = connection_of(ctx.session)
        if connection is not None and standing_channel(connection):
            self._listener(connection, ctx.session).level = LEVELS.index(params.level)
            await self._wake()
        return EmptyResult()

    # --- what is watched ---------------------------------------------------------------------

    async def _watch(self, uris: list[str]) -> None:
        """Count a watcher for each URI (all or none), reading a baseline digest for each new one."""
        new = {uri for uri in uris if uri not in self._watched}
        if len(self._watched) + len(new) > MAX_WATCHED:
            raise MCPError(INVALID_PARAMS, f"too_many_subscriptions: the server watches at most {MAX_WATCHED} "
                           "resources at once")
        for uri in uris:
            self._watched[uri] += 1
            if self._watched[uri] == 1:
                self._digests[uri] = await self._digest(uri)

    def _unwatch(self, uris: Iterable[str]) -> None:
        for uri in uris:
            self._watched[uri] -= 1
            if self._watched[uri] <= 0:
                del self._watched[uri]
                self._digests.pop(uri, None)

    async def _digest(self, uri: str) -> str | None:
        """A digest of the text a client would read; ``MISSING`` when it is gone, None when unknown now."""
        try:
            target = resources.parse(uri)
            if target is None:
                return None  # not ours: accepted, never changes
            text = await resources.read_text(self._services, target)
        except NotFound:
            return MISSING
        except AppError:
            return None
        return hashlib.sha256(text.encode()).hexdigest()

    # --- the watcher -------------------------------------------------------------------------

    async def run(self) -> None:
        """Follow the markers until cancelled; one failed round is logged and the next one tries again."""
        announce = asyncio.create_task(self._announce_loaded())
        try:
            while True:
                await asyncio.sleep(self._markers.poll_interval_s)
                if not self._wanted():
                    self._awake = False
                    continue
                await self._wake()  # a listen stream without URIs wakes it here
                now, last = await self._markers.markers(), self._last
                if last is not None and now.board is not None and now.board != last.board:
                    await self._guarded(self._board_moved)
                if last is not None and now.memories is not None and now.memories != last.memories:
                    await self._guarded(self._memories_moved)
                await self._guarded(self._embedder_moved)
                self._last = self.seen = now
        finally:
            announce.cancel()

    async def _guarded(self, step: Any) -> None:
        try:
            await step()
        except AppError as exc:
            logger.debug("live notifications skipped a round: %s", exc.code)
        except Exception:
            logger.warning("live notifications failed a round", exc_info=True)

    async def _baseline(self) -> None:
        board = await self._services.kanban.get_board()
        self._task_ids = frozenset(card.id for column in board.columns for card in column.cards)
        self._jobs = {job.id: job.status for job in await self._services.kanban.list_jobs(limit=RECENT_JOBS)}
        self._memory_count = await listing.count(self._services.memory.store)

    async def _board_moved(self) -> None:
        board = await self._services.kanban.get_board()
        ids = frozenset(card.id for column in board.columns for card in column.cards)
        if self._task_ids is not None and ids != self._task_ids:
            await self._list_changed()
        self._task_ids = ids
        await self._jobs_moved()  # first: a client hears of a job's end before any later change to the board
        await self._refresh(uri for uri in list(self._watched) if uri == resources.BOARD_URI or uri.startswith("task://"))

    async def _memories_moved(self) -> None:
        count = await listing.count(self._services.memory.store)
        if self._memory_count is not None and count != self._memory_count:
            await self._list_changed()
        self._memory_count = count
        await self._refresh(uri for uri in list(self._watched) if uri.startswith("memory://"))

    async def _refresh(self, uris: Iterable[str]) -> None:
        for uri in uris:
            digest = await self._digest(uri)
            before = self._digests.get(uri)
            if uri not in self._watched or digest is None:
                continue
            self._digests[uri] = digest
            if before is not None and digest != before:
                await self._updated(uri)

    async def _jobs_moved(self) -> None:
        jobs = await self._services.kanban.list_jobs(limit=RECENT_JOBS)
        for job in jobs:
            before = self._jobs.get(job.id)
            new = before is None and job.started_ms >= self._since_ms  # started and ended within one round
            if job.status != "running" and (before == "running" or new):
                subject = f"job {job.id}" + (f" for {job.task_id}" if job.task_id else "")
                code = f" (exit {job.exit_code})" if job.exit_code is not None else ""
                level: LoggingLevel = "notice" if job.status == "succeeded" else "warning"
                await self.log(level, {"event": "job_ended", "message": f"{subject} {job.status}{code}",
                                       "job_id": job.id, "task_id": job.task_id, "status": job.status,
                                       "exit_code": job.exit_code})
        self._jobs = {job.id: job.status for job in jobs}

    async def _embedder_moved(self) -> None:
        memory = self._services.memory
        if memory.loads.pending():
            return  # the model is still loading: not a change of the provider
        ready = bool(memory.embedder.ready)
        if self._embedder_ready is not None and ready != self._embedder_ready:
            if ready:
                await self.log("notice", {"event": "embedder_back", "message": "the embedding provider answers "
                                          "again: recall searches by meaning and remember stores"})
            else:
                await self.log("warning", {"event": "embedder_unavailable", "message": "the embedding provider "
                                           "does not answer: recall falls back to keywords and remember answers "
                                           "embedding_unavailable until it is back"})
        self._embedder_ready = ready

    async def _announce_loaded(self) -> None:
        memory = self._services.memory
        if not memory.loads.pending():
            return
        await memory.loads.wait()
        failed = sorted(name for name, seconds in memory.loads.times().items() if seconds is None)
        if failed:
            await self.log("warning", {"event": "loading_failed", "message": "memory-mcp finished starting, but "
                                       f"could not load: {', '.join(failed)} (the server log says why)"})
        else:
            await self.log("notice", {"event": "loaded", "message": "memory-mcp finished loading: the embedding "
                                      "model and the vector index are ready, so recall is exact and fast"})

    # --- sending -----------------------------------------------------------------------------

    async def _updated(self, uri: str) -> None:
        note = ResourceUpdatedNotification(params=ResourceUpdatedNotificationParams(uri=uri))
        await self._send([c for c, listener in self._listeners.items() if uri in listener.uris], note)
        await self._bus.publish(ResourceUpdated(uri=uri))

    async def _list_changed(self) -> None:
        await self._send([c for c, listener in self._listeners.items() if listener.lists or listener.uris],
                         ResourceListChangedNotification())
        await self._bus.publish(ResourcesListChanged())

    async def log(self, level: LoggingLevel, data: dict[str, Any]) -> None:
        """A ``notifications/message`` to every connection whose level lets it through."""
        rank = LEVELS.index(level)
        note = LoggingMessageNotification(params=LoggingMessageNotificationParams(level=level, data=data,
                                                                                  logger="memory-mcp"))
        await self._send([c for c, listener in self._listeners.items()
                          if listener.level is not None and rank >= listener.level], note)

    async def _send(self, connections: list[Connection], note: ServerNotification) -> None:
        await asyncio.gather(*(self._send_one(connection, note) for connection in connections))

    async def _send_one(self, connection: Connection, note: ServerNotification) -> None:
        listener = self._listeners.get(connection)
        if listener is None:
            return
        try:
            with anyio.fail_after(SEND_TIMEOUT_S):
                await listener.session.send_notification(note)
        except Exception:  # closed, broken or stalled: this client is gone, the others still hear
            logger.debug("a client no longer reads its stream: its subscriptions end", exc_info=True)
            self._forget(connection)


def register(server: ToolServer, live: Live) -> None:
    """Serve the subscription and logging-level methods, and meet every request in ``live``."""
    server.protocol.add_request_handler("resources/subscribe", SubscribeRequestParams, live.subscribe)
    server.protocol.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, live.unsubscribe)
    server.protocol.add_request_handler("logging/setLevel", SetLevelRequestParams, live.set_level)
    server.middleware.append(live)


def _check_uri(uri: str) -> None:
    """A malformed id of ours is refused; a URI of another kind is accepted and never fires (as a listen
    stream honours a subscription to a resource that does not exist)."""
    try:
        resources.parse(uri)
    except AppError as exc:
        raise MCPError(INVALID_PARAMS, f"{exc.code}: {exc.message}") from exc
