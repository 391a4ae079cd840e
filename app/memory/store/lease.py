"""One compacting instance at a time on object storage: a lease row in a one-row LanceDB table.

Why: instances sharing a table on object storage have no common lock. Two compacting at once rewrite
the same fragments twice (one of the commits then fails as a conflict) and both prune versions. A
lease elects one. Why a LanceDB table rather than a lease object of our own: a LanceDB commit is a
conditional put (If-None-Match on S3 and R2, a generation match on GCS, an ETag on Azure), so of two
updates that read the same version exactly one commits; the other is re-run on the newer version,
where the row no longer holds what it read and nothing is updated. An update whose where-clause
names the holder and expiry it read is thus a compare-and-set on every store LanceDB supports, with
the credentials it already has (tested with racing processes in tests/team/test_lease.py).

The holder renews the lease every ``RENEW_EVERY`` while it works (``held``), so a compaction of any
length keeps it, and a holder that dies stops renewing: the lease lapses ``TTL`` after its last renewal,
not minutes later. Whether it lapsed is judged without comparing clocks of different machines: an
instance takes over only once it has itself seen the lease row unchanged for ``TTL`` by its own
monotonic clock (``try_acquire``), so a clock running ahead on one instance cannot take a live lease.
(``expires_ms`` is what the holder's clock said, for people reading the table.) A holder that finds its
renewal refused has lost the lease (``lost``); it lets the rewrite it started finish, since Lance's
conflict check keeps a second compaction correct, and skips the pruning after it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pyarrow as pa

from app.memory.store.filters import literal

logger = logging.getLogger(__name__)

TTL = timedelta(seconds=30)  # six renewals: one slow put to the store does not lose the lease
RENEW_EVERY = timedelta(seconds=5)
# Each take, renewal and release is a commit of the lease table; its old versions are pruned by the
# holder once this many have piled up. A read of the lease takes well under a second, so two minutes
# of old versions leave any reader its version.
PRUNE_EVERY_VERSIONS = 64
LEASE_VERSIONS_KEPT = timedelta(minutes=2)
SCHEMA = pa.schema([pa.field("holder", pa.string()), pa.field("expires_ms", pa.int64())])


def lease_table_name(table: str) -> str:
    return f"{table}_compaction_lease"


def holder_name() -> str:
    """Who holds a lease: readable in the table (host, pid) and unique per instance."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class CompactionLease:
    """``held()`` says whether this instance may compact now; other instances get False until it ends."""

    def __init__(self, db: Any, table: str, *, holder: str | None = None, ttl: timedelta = TTL,
                 renew_every: timedelta = RENEW_EVERY) -> None:
        self.db = db
        self.name = lease_table_name(table)
        self.holder = holder or holder_name()
        self.ttl_ms = int(ttl.total_seconds() * 1000)
        self.renew_every_s = renew_every.total_seconds()
        self._table: Any | None = None
        self._pruned_at = 0
        self._seen: tuple[str, int, float] | None = None  # another holder's row, and when we first saw it so
        self.lost = False  # set when a renewal found the lease taken over
        self.renewals = 0

    @contextlib.contextmanager
    def held(self) -> Iterator[bool]:
        """Take the lease for the block if it is free or lapsed, renewing it meanwhile; yields whether taken."""
        expires = self.try_acquire()
        if expires is None:
            yield False
            return
        self.lost = False
        stop = threading.Event()
        current = [expires]
        renewer = threading.Thread(target=self._keep_renewing, args=(current, stop), name="compaction-lease",
                                   daemon=True)
        renewer.start()
        try:
            yield True
        finally:
            stop.set()
            renewer.join()
            if not self.lost:
                self.release(current[0])

    def try_acquire(self) -> int | None:
        """Take the lease unless another live holder has it; returns its expiry (ms), None if not taken."""
        table = self._lease_table()
        holder, expires = self.read()
        if holder and holder != self.holder and not self._lapsed(holder, expires):
            logger.info("compaction skipped: %s holds the lease", holder)
            return None
        mine = _now_ms() + self.ttl_ms
        result = table.update(where=_is(holder, expires), values={"holder": self.holder, "expires_ms": mine})
        if int(result.rows_updated) != 1:
            logger.info("compaction skipped: another instance took the lease first")
            return None
        self._seen = None
        return mine

    def renew(self, expires: int) -> int | None:
        """Extend our lease (read as ``expires``); returns the new expiry, None if it is no longer ours."""
        table = self._lease_table()
        mine = max(_now_ms() + self.ttl_ms, expires + 1)  # always a new value: observers see it change
        result = table.update(where=_is(self.holder, expires), values={"expires_ms": mine})
        if int(result.rows_updated) != 1:
            return None
        self.renewals += 1
        self._prune(table)
        return mine

    def release(self, expires: int) -> None:
        """Give the lease back (if still ours), pruning the lease table's old versions now and then."""
        table = self._lease_table()
        try:
            self._prune(table)
            table.update(where=_is(self.holder, expires), values={"holder": "", "expires_ms": 0})
        except Exception:  # noqa: BLE001 - an unreleased lease only delays the next compaction by TTL
            logger.exception("releasing the compaction lease failed; it lapses on its own")

    def _lapsed(self, holder: str, expires: int) -> bool:
        """Whether we have seen this holder's row unchanged for TTL (our own monotonic clock)."""
        now = time.monotonic()
        if self._seen is None or self._seen[:2] != (holder, expires):
            self._seen = (holder, expires, now)
        return (now - self._seen[2]) * 1000 >= self.ttl_ms

    def _keep_renewing(self, current: list[int], stop: threading.Event) -> None:
        while not stop.wait(self.renew_every_s):
            try:
                renewed = self.renew(current[0])
            except Exception:  # noqa: BLE001 - the store may answer the next one; TTL spans several
                logger.warning("renewing the compaction lease failed; retrying", exc_info=True)
                continue
            if renewed is None:
                logger.warning("the compaction lease was taken over during a rewrite; its pruning is skipped")
                self.lost = True
                return
            current[0] = renewed

    def read(self) -> tuple[str, int]:
        """(holder, expiry ms) as the lease table holds them now ("" and 0: free)."""
        row = self._lease_table().search().select(["holder", "expires_ms"]).limit(None).to_arrow().to_pylist()
        if len(row) != 1:
            raise RuntimeError(f"the lease table {self.name} holds {len(row)} rows, not one")
        return str(row[0]["holder"] or ""), int(row[0]["expires_ms"] or 0)

    def _lease_table(self) -> Any:
        """Open the lease table, creating it with its one free row; of racing creators one wins."""
        if self._table is None:
            try:
                self._table = self.db.open_table(self.name)
            except (FileNotFoundError, ValueError):
                free = pa.table({"holder": [""], "expires_ms": [0]}, schema=SCHEMA)
                try:
                    self._table = self.db.create_table(self.name, data=free, mode="create")
                except (OSError, ValueError, RuntimeError):  # another instance created it first
                    self._table = self.db.open_table(self.name)
        return self._table

    def _prune(self, table: Any) -> None:
        version = int(table.version)
        if version - self._pruned_at >= PRUNE_EVERY_VERSIONS:
            table.optimize(cleanup_older_than=LEASE_VERSIONS_KEPT)
            self._pruned_at = int(table.version)


def _is(holder: str, expires: int) -> str:
    return f"holder = {literal(holder)} AND expires_ms = {int(expires)}"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
