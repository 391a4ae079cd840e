"""The journal's contract, and the group commit both backends share.

A journal is a durable, ordered log of entries per table. Appends commit in sequence order (each
backend serialises them per table), so the entries a flush has folded into the table are always a
prefix: ``flushed()`` gives the last sequence number folded in and the table version that holds it.
That makes "what is not in the table yet" one comparison, on every instance.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol

from app.memory.journal.entries import Entry

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Marker:
    """A flush: entries up to ``through_seq`` are in the table from ``version`` on."""

    through_seq: int
    version: int


@dataclass(frozen=True)
class Depth:
    rows: int  # entries not folded into the table yet
    oldest_ms: int | None  # when the oldest of them was written


class Journal(Protocol):
    where: str  # for logs and doctor: a path, or the database without its password
    across_machines: bool  # instances on other machines append to it too

    def append(self, entries: Sequence[Entry]) -> list[Entry]:
        """Write entries durably (one transaction); returns them with their sequence numbers.

        Raises:
            JournalUnavailable: nothing was written.
        """

    def read_after(self, seq: int, limit: int) -> list[Entry]: ...

    def markers_after(self, through_seq: int) -> list[Marker]: ...

    def flushed(self) -> Marker: ...

    def mark_flushed(self, marker: Marker) -> None: ...

    def rewind(self, version: int) -> Marker:
        """Forget the flushes recorded past table ``version`` (the table went back to it: a damaged head was
        quarantined, or it was repaired), so their entries are flushed again; returns the newest flush kept."""

    def depth(self) -> Depth: ...

    def purge(self, before_ms: int) -> int:
        """Drop flushed entries written before ``before_ms``; returns how many."""

    def close(self) -> None: ...


class GroupCommit:
    """Appends from concurrent callers written together: one transaction (one fsync) for all that queued
    while the previous one was written, so 32 writers pay about one journal write each, not 32."""

    def __init__(self, write: Callable[[list[Entry]], list[Entry]], name: str) -> None:
        self._write = write
        self._name = name
        self._cond = threading.Condition()
        self._queue: list[tuple[list[Entry], Future[list[Entry]]]] = []
        self._thread: threading.Thread | None = None
        self._closed = False

    def submit(self, entries: Sequence[Entry]) -> Future[list[Entry]]:
        future: Future[list[Entry]] = Future()
        with self._cond:
            if self._closed:
                raise RuntimeError("the journal is closed")
            self._queue.append((list(entries), future))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify()
        return future

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
            thread = self._thread
        if thread is not None:
            thread.join(30)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    self._thread = None
                    return
                batch, self._queue = self._queue, []
            try:
                written = self._write([entry for entries, _ in batch for entry in entries])
            except BaseException as exc:  # noqa: BLE001 - every caller of the batch gets the failure
                for _, future in batch:
                    future.set_exception(exc)
                continue
            start = 0
            for entries, future in batch:
                future.set_result(written[start : start + len(entries)])
                start += len(entries)
