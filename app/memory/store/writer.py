"""The single writer task: every mutation of the table goes through one bounded queue.

Why one writer: hundreds of concurrent LanceDB commits from one process fail with "Too many
concurrent writers", and each single-row commit leaves a fragment. The writer coalesces queued adds
into one ``table.add`` (a 100-row batch costs about what one row costs), runs every commit in a
worker thread under the cross-process lock with retries, and resolves a caller's future only after
its commit succeeded, so an acknowledged write is durable. It compacts every
``compact_every_commits`` commits once the rows written since the last compaction reach
1/``COMPACT_GROWTH`` of the table; in between, every ``TAIL_MERGE_COMMITS`` commits, and when no
write has come for ``IDLE_MERGE_S``, it merges the fragments the commits since the last merge left
into one.

Why the row share: Lance merges the small new fragments together with the (smaller than a million
rows) fragment before them, so a compaction rewrites the whole table. On a fixed commit count that
capped a single-row writer far below what it could commit; tied to the table's growth, the rewrite
cost per written row stays bounded at any size (docs/performance.md, 'Compaction and tail merges').

Why the tail merge: until then each single-row commit leaves a fragment, and each fragment makes
every later commit slower; one writer at one row a commit would pile up thousands of fragments before
the row share triggers. Merging only the tail costs a small fraction of a full compaction, so merging
every ``TAIL_MERGE_COMMITS`` commits keeps that overhead bounded for little merging work
(docs/performance.md, 'Compaction and tail merges').

Why idle time merges rather than compacts: a compaction on a timer (it was: 2 minutes after the last
compaction, whenever there had been writes) broke the row share for a store written a memory every few
minutes, the way agents write: the first write after each quiet spell rewrote the whole table for one
row, and pruned the versions the quiet spell had left, including the one that was the newest a moment
before, which another process might still be reading.

The writer only decides when; the tail merges and compactions run in their own thread
(``housekeeping``), so no write waits for one on object storage, where they run under the compaction
lease (an instance that cannot take it skips that round, whose fragments the holder's rewrite takes in
as well). On a local table they still take the write lock, which the writer's commits wait for.

Every write has a deadline (``commit_deadline_s`` from its submission): one still queued past it is
dropped and answered 503 ``store_busy`` with Retry-After; one being committed stops retrying past it
(``commits.deadline``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from app.errors import AppError, Unavailable
from app.memory.errors import StoreBusy
from app.memory.store import commits
from app.memory.store.housekeeping import Housekeeper
from app.memory.store.table import Store
from app.settings import Settings

logger = logging.getLogger(__name__)

IDLE_MERGE_S = 120.0
COMPACT_GROWTH = 16
TAIL_MERGE_COMMITS = 128
OpKind = Literal["add", "update", "delete", "stop"]


@dataclass
class _Op:
    kind: OpKind
    future: asyncio.Future[Any]
    rows: list[dict[str, Any]] = field(default_factory=list)
    memory_id: str = ""
    values: dict[str, Any] = field(default_factory=dict)
    deadline: float | None = None  # time.monotonic() by which it must have landed
    started: bool = False  # handed to a commit: no longer dropped at its deadline


class Writer:
    """Owns the write queue of one table; ``start`` once, ``close`` drains and stops."""

    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings
        self.housekeeper = Housekeeper(store, settings)
        self.batch_max = settings.write_batch_max
        self.compact_every = settings.compact_every_commits
        self._queue: asyncio.Queue[_Op] = asyncio.Queue(maxsize=settings.write_queue_max)
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._commits_since_compact = 0
        self._rows_since_compact = 0
        self._table_rows: int | None = None  # counted (cheaply, metadata only) when first needed
        self._commits_since_merge = 0
        self._rows_since_merge = 0
        self.commits = 0

    @property
    def compactions(self) -> int:
        return self.housekeeper.compactions

    @property
    def tail_merges(self) -> int:
        return self.housekeeper.tail_merges

    @property
    def skipped_for_lease(self) -> int:
        return self.housekeeper.skipped_for_lease

    async def housekeeping_idle(self, timeout_s: float = 60.0) -> bool:
        """Wait until no tail merge or compaction is asked for or running; False on timeout."""
        return await asyncio.to_thread(self.housekeeper.wait_idle, timeout_s)

    @property
    def alive(self) -> bool:
        return self._task is not None and not self._task.done()

    @property
    def depth(self) -> int:
        return self._queue.qsize()

    def start(self) -> None:
        self.housekeeper.start()
        self._task = asyncio.create_task(self._run(), name="memory-writer")
        self._task.add_done_callback(_log_crash)

    async def close(self) -> None:
        """Refuse new work, finish everything queued and the rewrite under way, then stop."""
        if self._task is None:
            return
        if not self._closing:
            self._closing = True
            await self._queue.put(_Op("stop", asyncio.get_running_loop().create_future()))
        try:
            await asyncio.shield(self._task)
        finally:
            await asyncio.to_thread(self.housekeeper.close)

    async def add(self, rows: list[dict[str, Any]]) -> list[str]:
        """Append rows; returns their final ids once committed.

        Raises:
            StoreBusy: the queue is full (retry later).
        """
        ids: list[str] = await self._submit(_Op("add", self._future(), rows=rows))
        return ids

    async def update(self, memory_id: str, values: dict[str, Any]) -> int:
        updated: int = await self._submit(_Op("update", self._future(), memory_id=memory_id, values=values))
        return updated

    async def delete(self, memory_id: str) -> int:
        deleted: int = await self._submit(_Op("delete", self._future(), memory_id=memory_id))
        return deleted

    def _future(self) -> asyncio.Future[Any]:
        return asyncio.get_running_loop().create_future()

    async def _submit(self, op: _Op) -> Any:
        if self._closing or self._task is None:
            raise Unavailable("the memory store is shutting down; retry shortly", code="store_closing")
        if self._task.done():  # never queue work nobody will take: the writer died (logged below)
            raise Unavailable("the memory writer stopped; restart the server", code="store_error")
        op.deadline = time.monotonic() + self.settings.commit_deadline_s
        try:
            self._queue.put_nowait(op)
        except asyncio.QueueFull:
            raise StoreBusy("the memory store is busy (write queue full); retry", retry_after_s=1) from None
        # shield: a caller that goes away must not cancel a write already queued for commit.
        try:
            return await asyncio.wait_for(asyncio.shield(op.future), self.settings.commit_deadline_s)
        except TimeoutError:
            if op.started:  # its commit may still land: never report it failed (commits.deadline)
                return await asyncio.shield(op.future)
            op.future.cancel()  # still queued: the writer skips it, so nothing is written
            raise commits.past_deadline("a write waiting in the queue") from None

    async def _run(self) -> None:
        pending: _Op | None = None
        while True:
            op = pending or await self._next()
            pending = None
            if op is None:
                await self._merge_tail()
                continue
            if op.kind == "stop":
                break
            if op.future.done():  # dropped at its deadline while queued
                continue
            if op.kind == "add":
                batch, pending = self._gather_adds(op)
                await self._commit_adds(batch)
                rows = sum(len(o.rows) for o in batch)
            else:
                await self._commit_one(op)
                rows = 1 if op.kind == "update" else 0  # an update rewrites its row at the end
                self._rows_since_compact += op.kind == "delete"  # deleted rows are reclaimed by compacting
            self._count_rows(rows)
            self.commits += 1
            self.housekeeper.wrote(rows)
            self._commits_since_compact += 1
            self._commits_since_merge += 1
            if await self._compaction_due():
                await self._compact()
            elif self._commits_since_merge >= TAIL_MERGE_COMMITS:
                await self._merge_tail()

    def _count_rows(self, rows: int) -> None:
        self._rows_since_compact += rows
        self._rows_since_merge += rows

    async def _compaction_due(self) -> bool:
        if self._commits_since_compact < self.compact_every:
            return False
        if self._table_rows is None:
            try:
                self._table_rows = await asyncio.to_thread(self.store.count)
            except Exception:  # noqa: BLE001 - no count, no size rule: compact as before
                logger.exception("counting the memory table failed")
                self._table_rows = 0
        return self._rows_since_compact * COMPACT_GROWTH >= self._table_rows

    async def _next(self) -> _Op | None:
        """The next op, or None when the writer has been idle for ``IDLE_MERGE_S`` with a tail to merge."""
        if self._commits_since_merge < 2:  # one fragment (or none) since the last merge: nothing to merge
            return await self._queue.get()
        try:
            return await asyncio.wait_for(self._queue.get(), timeout=IDLE_MERGE_S)
        except TimeoutError:
            return None

    def _gather_adds(self, first: _Op) -> tuple[list[_Op], _Op | None]:
        """Coalesce the adds queued right behind ``first`` (order kept: stop at any other op)."""
        batch, rows = [first], len(first.rows)
        while rows < self.batch_max and not self._queue.empty():
            nxt = self._queue.get_nowait()
            if nxt.future.done() and nxt.kind != "stop":  # dropped at its deadline while queued
                continue
            if nxt.kind != "add" or rows + len(nxt.rows) > self.batch_max:
                return batch, nxt
            batch.append(nxt)
            rows += len(nxt.rows)
        return batch, None

    async def _commit_adds(self, batch: list[_Op]) -> None:
        rows = [row for op in batch for row in op.rows]
        try:
            with _started(batch):
                await asyncio.to_thread(self.store.add, rows)
        except Exception as exc:  # noqa: BLE001 - reported to every caller of the batch
            error = _as_app_error(exc, "add")
            for op in batch:
                _fail(op, error)
            return
        for op in batch:
            _resolve(op, [row["id"] for row in op.rows])

    async def _commit_one(self, op: _Op) -> None:
        try:
            with _started([op]):
                if op.kind == "update":
                    result = await asyncio.to_thread(self.store.update, op.memory_id, op.values)
                else:
                    result = await asyncio.to_thread(self.store.delete, op.memory_id)
        except Exception as exc:  # noqa: BLE001 - reported to the caller
            _fail(op, _as_app_error(exc, op.kind))
            return
        _resolve(op, result)

    async def _merge_tail(self) -> None:
        """Ask the housekeeping thread to merge the fragments the commits since the last merge left."""
        rows, self._rows_since_merge, self._commits_since_merge = self._rows_since_merge, 0, 0
        self.housekeeper.request_merge(rows)

    async def _compact(self) -> None:
        """Ask the housekeeping thread to compact the table (it runs while the writer goes on)."""
        self._commits_since_compact = 0
        self._rows_since_compact = 0
        self._commits_since_merge = 0
        self._rows_since_merge = 0
        self._table_rows = None
        self.housekeeper.request_compaction()


def _started(ops: list[_Op]) -> contextlib.AbstractContextManager[None]:
    """Mark ``ops`` as handed to a commit, and give the commit the latest of their deadlines (the batch
    is one commit: an op near its deadline must not fail the fresh ones it was batched with)."""
    for op in ops:
        op.started = True
    deadlines = [op.deadline for op in ops if op.deadline is not None]
    return commits.deadline(max(deadlines) if deadlines else None)


def _log_crash(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.critical("the memory writer task crashed; writes are refused", exc_info=task.exception())


def _as_app_error(exc: Exception, what: str) -> AppError:
    if isinstance(exc, AppError):
        return exc
    logger.error("memory store %s failed", what, exc_info=exc)
    return Unavailable(f"the memory store could not {what} ({type(exc).__name__}); nothing was written",
                       code="store_error", retry_after_s=1)


def _resolve(op: _Op, value: Any) -> None:
    if not op.future.done():
        op.future.set_result(value)


def _fail(op: _Op, error: BaseException) -> None:
    if not op.future.done():
        op.future.set_exception(error)
