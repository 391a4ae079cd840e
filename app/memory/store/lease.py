"""One compacting instance at a time on object storage: a lease row in a one-row LanceDB table.

Why: instances sharing a table on object storage have no common lock. Two compacting at once rewrite
the same fragments twice (one of the commits then fails as a conflict) and both prune versions. A
lease elects one. Why a LanceDB table rather than a lease object of our own: a LanceDB commit is a
conditional put (If-None-Match on S3 and R2, a generation match on GCS, an ETag on Azure), so of two
updates that read the same version exactly one commits; the other is re-run on the newer version,
where the row no longer holds what it read and nothing is updated. An update whose where-clause
names the holder and expiry it read is thus a compare-and-set on every store LanceDB supports, with
the credentials it already has (tested with racing processes in tests/team/test_lease.py).

A holder that dies keeps the lease until it expires (``TTL``); compaction then waits that long.
Expiry compares wall clocks of different machines, so the TTL is far above any sane clock skew.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pyarrow as pa

from app.memory.store.filters import literal

logger = logging.getLogger(__name__)

TTL = timedelta(minutes=10)  # well above a compaction at 100k rows on object storage (seconds)
# Each take and release is a commit of the lease table; its old versions are pruned by the holder
# once this many have piled up, keeping an hour of them for instances reading it.
PRUNE_EVERY_VERSIONS = 64
LEASE_VERSIONS_KEPT = timedelta(hours=1)
SCHEMA = pa.schema([pa.field("holder", pa.string()), pa.field("expires_ms", pa.int64())])


def lease_table_name(table: str) -> str:
    return f"{table}_compaction_lease"


def holder_name() -> str:
    """Who holds a lease: readable in the table (host, pid) and unique per instance."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class CompactionLease:
    """``held()`` says whether this instance may compact now; other instances get False until it ends."""

    def __init__(self, db: Any, table: str, *, holder: str | None = None, ttl: timedelta = TTL) -> None:
        self.db = db
        self.name = lease_table_name(table)
        self.holder = holder or holder_name()
        self.ttl_ms = int(ttl.total_seconds() * 1000)
        self._table: Any | None = None
        self._pruned_at = 0

    @contextlib.contextmanager
    def held(self) -> Iterator[bool]:
        """Take the lease for the block if it is free or expired; yields whether it was taken."""
        expires = self.try_acquire()
        try:
            yield expires is not None
        finally:
            if expires is not None:
                self.release(expires)

    def try_acquire(self) -> int | None:
        """Take the lease unless another live holder has it; returns its expiry (ms), None if not taken."""
        table = self._lease_table()
        holder, expires = self.read()
        now = _now_ms()
        if holder and holder != self.holder and expires > now:
            logger.info("compaction skipped: %s holds the lease for %.0f s more", holder, (expires - now) / 1000)
            return None
        mine = now + self.ttl_ms
        result = table.update(where=_is(holder, expires), values={"holder": self.holder, "expires_ms": mine})
        if int(result.rows_updated) != 1:
            logger.info("compaction skipped: another instance took the lease first")
            return None
        return mine

    def release(self, expires: int) -> None:
        """Give the lease back (if still ours), pruning the lease table's old versions now and then."""
        table = self._lease_table()
        try:
            self._prune(table)
            table.update(where=_is(self.holder, expires), values={"holder": "", "expires_ms": 0})
        except Exception:  # noqa: BLE001 - an unreleased lease only delays the next compaction by TTL
            logger.exception("releasing the compaction lease failed; it expires on its own")

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
