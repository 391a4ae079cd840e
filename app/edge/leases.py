"""Per-credential limits on long-lived things (MCP sessions, event streams) that never lock anybody out.

Each open session or stream is a lease held by the credential that opened it. A credential may hold
``per_owner`` leases, and the server ``total`` (a backstop against clients inventing credentials).
When a new lease would pass either limit, the least recently used *idle* lease (no request in flight)
of that credential (for ``total``: of anybody) is evicted instead of refusing the newcomer; only when
every candidate is busy is the newcomer refused. So abandoned sessions of one token cost that token its
oldest idle ones, never another token its access.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from app.errors import Unavailable

logger = logging.getLogger(__name__)

ANONYMOUS_OWNER = "anonymous"


@dataclass
class Lease:
    """One open session or stream: whose it is, how busy, and how to end it."""

    key: Hashable
    owner: str
    evict: Callable[[], None]
    busy: int = 0
    last_used: float = field(default_factory=time.monotonic)

    def add_busy(self, delta: int) -> None:
        """Count work running on the lease beyond the requests :meth:`LeaseTable.in_use` sees."""
        self.busy += delta
        self.last_used = time.monotonic()


class LeaseTable:
    """Leases in least-recently-used order, with the eviction rule of the module docstring."""

    def __init__(self, what: str, *, per_owner: int, total: int) -> None:
        self.what = what
        self.per_owner = per_owner
        self.total = total
        self._leases: OrderedDict[Hashable, Lease] = OrderedDict()

    def __len__(self) -> int:
        return len(self._leases)

    def held_by(self, owner: str) -> int:
        return sum(1 for lease in self._leases.values() if lease.owner == owner)

    def get(self, key: Hashable) -> Lease | None:
        return self._leases.get(key)

    def admit(self, key: Hashable, owner: str, evict: Callable[[], None]) -> Lease:
        """Register a new lease, evicting idle ones to make room.

        Raises:
            Unavailable: the limit is reached and every lease that could give way is busy.
        """
        self.make_room(owner)
        lease = Lease(key, owner, evict)
        self._leases[key] = lease
        return lease

    def make_room(self, owner: str) -> None:
        """Evict until ``owner`` may open one more (see :meth:`admit`)."""
        while self.held_by(owner) >= self.per_owner:
            self._evict_oldest_idle(owner)
        while len(self._leases) >= self.total:
            self._evict_oldest_idle(None)

    def _evict_oldest_idle(self, owner: str | None) -> None:
        for lease in self._leases.values():
            if lease.busy == 0 and (owner is None or lease.owner == owner):
                break
        else:
            scope = "this credential's" if owner is not None else "all"
            raise Unavailable(
                f"too many open {self.what}: {scope} {self.per_owner if owner else self.total} are busy; retry shortly",
                code=f"too_many_{self.what.replace(' ', '_')}",
                retry_after_s=5,
            )
        del self._leases[lease.key]
        logger.info("%s limit of a credential reached: the least recently used idle one gives way", self.what)
        lease.evict()

    def release(self, key: Hashable) -> None:
        self._leases.pop(key, None)

    @contextmanager
    def in_use(self, key: Hashable) -> Iterator[None]:
        """Mark the lease busy while a request runs on it, and most recently used."""
        lease = self._leases.get(key)
        if lease is None:
            yield
            return
        lease.busy += 1
        self._touch(lease)
        try:
            yield
        finally:
            lease.busy -= 1
            self._touch(lease)

    def _touch(self, lease: Lease) -> None:
        lease.last_used = time.monotonic()
        if lease.key in self._leases:
            self._leases.move_to_end(lease.key)
