"""Per-credential limits on long-lived things (MCP sessions, event streams) that never lock anybody out.

Each open session or stream is a lease held by the credential that opened it. A credential may hold
``per_owner`` leases, and the server ``total`` (a backstop against clients inventing credentials).
When a new lease would pass either limit, the least recently used *idle* lease (no request in flight)
of that credential (for ``total``: of anybody) is evicted instead of refusing the newcomer; only when
every candidate is busy is the newcomer refused. So abandoned sessions of one token cost that token its
oldest idle ones, never another token its access.
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
            logger.info("%s limit reached: %d least recently used idle one(s) give way", self.what, len(victims))
        return victims

    def _oldest_idle(self, owner: str | None, count: int, taken: list[Lease]) -> list[Lease]:
        found = [
            lease for lease in self._leases.values()
            if lease.busy == 0 and (owner is None or lease.owner == owner) and lease not in taken
        ][:count]
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
