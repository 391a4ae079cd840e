"""Whether the memory table or the board changed, whoever changed it: this process, another one, another instance.

Two markers cost microseconds and see every writer: the memory table's version (read off its
``_versions`` directory, which other processes and instances commit to as well) and the board's change
marker (SQLite's ``data_version``, or a counter every PostgreSQL write bumps). The dashboard's
``/api/events`` and the MCP resource notifications read them through one ``ChangeMarkers``, so however
many streams and sessions wait, the markers are read at most once per interval.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from app.container import Services
from app.errors import Unavailable

logger = logging.getLogger(__name__)

POLL_INTERVAL_S = 0.25  # a write shows on an open page, or in a client's notification, within about half a second


@dataclass(frozen=True)
class Markers:
    """Numbers that change when their store changes; None while a store cannot be read."""

    memories: int | None
    board: int | None


class ChangeMarkers:
    """Reads both markers at most once per poll interval, however many readers ask."""

    def __init__(self, services: Services, *, poll_interval_s: float = POLL_INTERVAL_S) -> None:
        self._services = services
        self.poll_interval_s = poll_interval_s
        self._lock = asyncio.Lock()
        self._read_at = -math.inf
        self._last = Markers(None, None)

    async def markers(self) -> Markers:
        """The current markers; a reading younger than most of an interval is shared."""
        async with self._lock:
            if time.monotonic() - self._read_at >= self.poll_interval_s * 0.8:
                self._last = Markers(await self._read(self._memory_version), await self._read(self._board_version))
                self._read_at = time.monotonic()
            return self._last

    async def fresh(self) -> Markers:
        """Both markers read now, past the shared reading (to tell whether a reader is up to date)."""
        return Markers(await self._read(self._memory_version), await self._read(self._board_version))

    async def _memory_version(self) -> int:
        store = self._services.memory.store
        return await asyncio.to_thread(store.probe.current)

    async def _board_version(self) -> int:
        return await self._services.kanban.change_marker()

    @staticmethod
    async def _read(marker: Callable[[], Awaitable[int]]) -> int | None:
        try:
            return await marker()
        except Unavailable:
            return None  # starting or stopping: readers hear about it when the marker comes back
        except Exception:
            logger.warning("change marker unreadable", exc_info=True)
            return None
