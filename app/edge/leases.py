"""Per-credential limits on long-lived things (MCP sessions, event streams) that never lock anybody out.

Each open session or stream is a lease held by the credential that opened it. A credential may hold
``per_owner`` leases, and the server ``total`` (a backstop against clients inventing credentials).
When a new lease would pass either limit, an *idle* lease (no request in flight) of that credential
(for ``total``: of anybody) is ended instead of refusing the newcomer, chosen in this order:

1. one that never made a call (an ``initialize`` nobody followed up; a stream that never carried a message),
2. one not used for ``RECENT_USE_S``,
3. only then one used recently;

the least recently used first within each. Only when every candidate is busy is the newcomer refused.
So with no token, where every local process is one credential, a process opening sessions it never
uses pushes out its own abandoned ones, never a client that is working (docs/operations.md, 'Sessions').
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import anyio
from starlette.datastructures import Headers
from starlette.types import Message, Receive, Scope

from app.errors import Unavailable

logger = logging.getLogger(__name__)

ANONYMOUS_OWNER = "anonymous"
#: A lease used within this many seconds gives way only when no unused or stale lease can.
RECENT_USE_S = 300.0
#: The time leases are judged by; a test replaces it to play minutes of use in milliseconds.
clock: Callable[[], float] = time.monotonic


def credential_of(scope: Scope) -> str | None:
    """Who opened a request: the edge guard's token id, else a digest of the credential, else nobody."""
    state = scope.get("state") or {}
    token_id = state.get("token_id")
    if token_id:
        return f"token:{token_id}"
    authorization = Headers(scope=scope).get("authorization")
    if authorization:
        # A digest, so the credential itself is never kept next to the session.
        return "credential:" + hashlib.sha256(authorization.encode("latin-1")).hexdigest()[:32]
    return None


@dataclass
class Lease:
    """One open session or stream: whose it is, how busy, and how to end it."""

    key: Hashable
    owner: str
    evict: Callable[[], object]  # ends it; what it returns (an awaitable, say) is the caller's to handle
    busy: int = 0
    calls: int = 0  # requests that did something, beyond opening it (an initialized notification is not one)
    last_used: float = field(default_factory=lambda: clock())

    def add_busy(self, delta: int) -> None:
        """Count work running on the lease beyond the requests :meth:`LeaseTable.in_use` sees."""
        self.busy += delta
        self.last_used = clock()

    def rank(self, now: float) -> int:
        """Who gives way first: 0 never called, 1 not used for ``RECENT_USE_S``, 2 used recently."""
        if self.calls == 0:
            return 0
        return 1 if now - self.last_used >= RECENT_USE_S else 2


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

    def admit(self, key: Hashable, owner: str, evict: Callable[[], object]) -> Lease:
        """Register a new lease, ending idle ones (their ``evict`` is called) to make room.

        Raises:
            Unavailable: the limit is reached and every lease that could give way is busy.
        """
        for victim in self.make_room(owner):
            victim.evict()
        lease = Lease(key, owner, evict)
        self._leases[key] = lease
        return lease

    def make_room(self, owner: str) -> list[Lease]:
        """Take out of the table the leases that must give way so ``owner`` may open one more.

        The caller ends them (``lease.evict()``).

        Raises:
            Unavailable: see :meth:`admit`.
        """
        victims: list[Lease] = []
        over_owner = self.held_by(owner) - self.per_owner + 1
        if over_owner > 0:
            victims = self._oldest_idle(owner, over_owner, [])
        over_total = len(self._leases) - len(victims) - self.total + 1
        if over_total > 0:
            victims += self._oldest_idle(None, over_total, victims)
        for victim in victims:
            del self._leases[victim.key]
        if victims:
            now = clock()
            ranks = [victim.rank(now) for victim in victims]
            logger.info("%s limit reached: %d idle one(s) give way (%d never used, %d unused for %gs, %d used "
                        "recently)", self.what, len(victims), ranks.count(0), ranks.count(1), RECENT_USE_S,
                        ranks.count(2))
        return victims

    def _oldest_idle(self, owner: str | None, count: int, taken: list[Lease]) -> list[Lease]:
        now = clock()
        idle = [
            lease for lease in self._leases.values()
            if lease.busy == 0 and (owner is None or lease.owner == owner) and lease not in taken
        ]
        found = sorted(idle, key=lambda lease: lease.rank(now))[:count]  # stable: least recently used first
        if len(found) < count:
            limit = f"this credential's {self.per_owner}" if owner is not None else f"all {self.total}"
            raise Unavailable(
                f"too many open {self.what}: {limit} are busy; retry shortly",
                code=f"too_many_{self.what.replace(' ', '_')}",
                retry_after_s=5,
            )
        return found

    def release(self, key: Hashable) -> None:
        self._leases.pop(key, None)

    def record_call(self, key: Hashable) -> None:
        """Count a call on the lease (for a caller that learns what a request is only once it reads it)."""
        lease = self._leases.get(key)
        if lease is not None:
            lease.calls += 1

    @contextmanager
    def in_use(self, key: Hashable, *, call: bool = True) -> Iterator[None]:
        """Mark the lease busy while a request runs on it, and most recently used; ``call``: count it as a call."""
        lease = self._leases.get(key)
        if lease is None:
            yield
            return
        lease.busy += 1
        lease.calls += call
        self._touch(lease)
        try:
            yield
        finally:
            lease.busy -= 1
            self._touch(lease)

    def _touch(self, lease: Lease) -> None:
        lease.last_used = clock()
        if lease.key in self._leases:
            self._leases.move_to_end(lease.key)


class Evictable:
    """A request's ``receive`` that reports the client gone once :meth:`evict` is called.

    A stream that must give way then ends exactly as it does when its client leaves (every stream
    closed, accepted calls drained); the caller only adds the end of the response body.
    """

    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self._evicted = anyio.Event()

    @property
    def evicted(self) -> bool:
        return self._evicted.is_set()

    def evict(self) -> None:
        self._evicted.set()

    async def receive(self) -> Message:
        message: Message = {"type": "http.disconnect"}
        if self.evicted:
            return message
        async with anyio.create_task_group() as group:

            async def from_client() -> None:
                nonlocal message
                message = await self._receive()
                group.cancel_scope.cancel()

            async def until_evicted() -> None:
                await self._evicted.wait()
                group.cancel_scope.cancel()

            group.start_soon(from_client)
            group.start_soon(until_evicted)
        return message
