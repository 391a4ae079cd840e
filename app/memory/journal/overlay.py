"""The journal entries the vector index does not hold yet, as reads must see them.

An entry stays here from the moment the journal took it (or this instance read it off the journal)
until the index holds the table version its flush landed in. Reads take a ``Snapshot`` first and then
ask the index, so a row is never missing in between: whatever left the overlay after the snapshot was
taken is in the index by the time it is asked. In a snapshot every id of the overlay names its newest
entry: the row it holds, or None for a delete, and the index's copy of that id is not shown.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.memory.index.exact_top import with_cosines
from app.memory.journal.base import Marker
from app.memory.journal.entries import Entry
from app.memory.store import filters


@dataclass(frozen=True)
class Snapshot:
    rows: dict[str, dict[str, Any] | None]  # id -> its row after the newest entry; None: deleted
    _ids: tuple[str, ...] = ()
    _matrix: np.ndarray | None = None  # the vectors of the rows, in ``_ids`` order

    def search(self, vector: np.ndarray, where: str | None, columns: tuple[str, ...] | None) -> list[dict[str, Any]]:
        """Every row passing ``where``, with ``score`` = its cosine to ``vector`` (only ``columns`` and ``id``)."""
        if self._matrix is None or not self._ids:
            return []
        keep = [i for i, memory_id in enumerate(self._ids) if filters.matches(where, self.rows[memory_id] or {})]
        if not keep:
            return []
        rows = [_project(self.rows[self._ids[i]] or {}, columns) for i in keep]
        return with_cosines(rows, self._matrix[keep], vector)

    def matching(self, where: str | None) -> list[dict[str, Any]]:
        """The rows (with their vectors) passing ``where``."""
        return [row for row in self.rows.values() if row is not None and filters.matches(where, row)]


class Overlay:
    """Thread-safe: the event loop adds acknowledged writes, the poller others', the flusher and the index drop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[int, Entry] = {}  # seq -> entry
        self._newest: dict[str, Entry] = {}  # id -> its newest entry here
        self._markers: list[Marker] = []  # flushes the index has not caught up with, by through_seq
        self._flushed_through = 0  # the newest flush known: entries up to it are in the table
        self._visible_through = 0  # entries up to it are in the index: never added again
        self._snapshot: Snapshot | None = None

    def add(self, entries: Iterable[Entry]) -> int:
        """Take entries in (ours once journaled, or read off the journal); returns how many were new here."""
        added = 0
        with self._lock:
            for entry in entries:
                if entry.seq <= self._visible_through or entry.seq in self._entries:
                    continue
                added += 1
                self._entries[entry.seq] = entry
                newest = self._newest.get(entry.id)
                if newest is None or newest.seq < entry.seq:
                    self._newest[entry.id] = entry
                self._snapshot = None
        return added

    def flushed(self, markers: Iterable[Marker]) -> None:
        """Flushes seen on the journal (ours or another instance's)."""
        with self._lock:
            for marker in markers:
                if marker.through_seq > self._flushed_through:
                    self._flushed_through = marker.through_seq
                if marker.through_seq > self._visible_through:
                    self._markers.append(marker)
            self._markers.sort(key=lambda m: m.through_seq)

    def index_at(self, version: int | None) -> None:
        """The index now holds the table at ``version``: drop what the flushes up to it put there."""
        if version is None:
            return
        with self._lock:
            through = self._visible_through
            while self._markers and self._markers[0].version <= version:
                through = max(through, self._markers.pop(0).through_seq)
            if through > self._visible_through:
                self._drop_through(through)

    def rewound(self, marker: Marker, entries: Iterable[Entry]) -> None:
        """The journal forgot the flushes past ``marker`` (a repair, or a recovery that opened an older version):
        its ``entries`` after it are waiting for the table again."""
        with self._lock:
            self._flushed_through = marker.through_seq
            self._visible_through = min(self._visible_through, marker.through_seq)
            self._markers = [m for m in self._markers if m.through_seq <= marker.through_seq]
            self._snapshot = None
        self.add(entries)

    def forget_flushed(self) -> None:
        """The table was replaced (another process dropped and created it): what was flushed to the old one is
        gone with it, and the entries that were waiting go to the new one."""
        with self._lock:
            self._markers.clear()
            self._drop_through(self._flushed_through)

    def _drop_through(self, through: int) -> None:
        self._visible_through = through
        for seq in [seq for seq in self._entries if seq <= through]:
            entry = self._entries.pop(seq)
            if self._newest.get(entry.id) is entry:
                del self._newest[entry.id]
        self._snapshot = None

    @property
    def unflushed(self) -> int:
        """Entries here that no flush has folded into the table yet."""
        with self._lock:
            return sum(1 for seq in self._entries if seq > self._flushed_through)

    def oldest_unflushed_ms(self) -> int | None:
        """When the oldest entry no flush has folded in yet was journaled."""
        with self._lock:
            waiting = [entry.created_ms for seq, entry in self._entries.items() if seq > self._flushed_through]
        return min(waiting) if waiting else None

    @property
    def flushed_through(self) -> int:
        with self._lock:
            return self._flushed_through

    def __len__(self) -> int:
        with self._lock:
            return len(self._newest)

    def snapshot(self) -> Snapshot:
        with self._lock:
            if self._snapshot is None:
                rows = {memory_id: (dict(entry.row) if entry.op != "delete" and entry.row else None)
                        for memory_id, entry in self._newest.items()}
                ids = tuple(memory_id for memory_id, row in rows.items() if row is not None)
                matrix = np.stack([np.asarray(rows[i]["vector"], dtype=np.float32) for i in ids]) if ids else None  # type: ignore[index]
                self._snapshot = Snapshot(rows, ids, matrix)
            return self._snapshot


def _project(row: dict[str, Any], columns: tuple[str, ...] | None) -> dict[str, Any]:
    if columns is None:
        return {key: value for key, value in row.items() if key != "vector"}
    return {column: row.get(column) for column in dict.fromkeys(("id", *columns))}
