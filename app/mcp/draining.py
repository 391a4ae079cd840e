"""Streams between a legacy SSE connection and the MCP server loop that let accepted requests finish.

The SDK's dispatcher cancels every in-flight handler as soon as its read stream ends, and the SSE
transport ends that stream the moment the client's GET closes. A ``remember`` accepted with 202 a
millisecond earlier was then cancelled half-way. Here the end of the read stream is held back until
every request read from it has been answered (bounded by ``DRAIN_S``), and replies written after the
client left are dropped instead of failing the handler: a request accepted runs to completion, once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import TracebackType
from typing import Any, Self

import anyio
from mcp.shared._stream_protocols import ReadStream, WriteStream
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCError, JSONRPCRequest, JSONRPCResponse

logger = logging.getLogger(__name__)

DRAIN_S = 120.0  # longer than any tool's own deadline (embedding calls give up after a few seconds)


class _ClosedOnExit:
    """``async with`` a stream closes it, as the SDK's own streams do."""

    async def aclose(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        await self.aclose()
        return None


class InFlight:
    """Ids of requests read from the client and not answered yet."""

    def __init__(self, on_change: Callable[[int], None] | None = None) -> None:
        self._on_change = on_change  # told +1/-1, so a session with work running never counts as idle
        self._ids: set[Any] = set()
        self._settled = anyio.Event()
        self._settled.set()

    def __len__(self) -> int:
        return len(self._ids)

    def started(self, request_id: Any) -> None:
        if request_id not in self._ids and self._on_change is not None:
            self._on_change(1)
        self._ids.add(request_id)
        if self._settled.is_set():
            self._settled = anyio.Event()

    def answered(self, request_id: Any) -> None:
        if request_id in self._ids and self._on_change is not None:
            self._on_change(-1)
        self._ids.discard(request_id)
        if not self._ids:
            self._settled.set()

    async def settled(self) -> None:
        """Wait until every request taken is answered, at most ``DRAIN_S``."""
        with anyio.move_on_after(DRAIN_S) as scope:
            await self._settled.wait()
        if scope.cancelled_caught:
            logger.warning("legacy SSE session closed with %d request(s) still running after %.0fs", len(self), DRAIN_S)


class DrainingReadStream(_ClosedOnExit):
    """The server loop's read stream: its end waits for :class:`InFlight` to settle."""

    def __init__(self, inner: ReadStream[SessionMessage | Exception], in_flight: InFlight) -> None:
        self._inner = inner
        self._in_flight = in_flight

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)  # the dispatcher restores the sender's contextvars

    async def receive(self) -> SessionMessage | Exception:
        try:
            item = await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            await self._in_flight.settled()
            raise
        if isinstance(item, SessionMessage) and isinstance(item.message, JSONRPCRequest):
            self._in_flight.started(item.message.id)
        return item

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None


class TolerantWriteStream(_ClosedOnExit):
    """The server loop's write stream: marks requests answered; after the client left, drops replies."""

    def __init__(self, inner: WriteStream[SessionMessage], in_flight: InFlight) -> None:
        self._inner = inner
        self._in_flight = in_flight

    async def send(self, item: SessionMessage, /) -> None:
        try:
            await self._inner.send(item)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            logger.debug("legacy SSE reply dropped: the client's stream is gone")
        finally:
            if isinstance(item.message, JSONRPCResponse | JSONRPCError) and item.message.id is not None:
                self._in_flight.answered(item.message.id)

    async def aclose(self) -> None:
        await self._inner.aclose()
