"""What the write journal holds: one entry per acknowledged write, in the order the journal took them.

An entry carries the whole row as it is after the write (for reads before it reaches the table, on
every instance), and for a ``patch`` the columns it changes (what the flush writes, so another writer's
change to the other columns of that row is kept). Rows are the table's columns, ``vector`` a float32
array; on disk the row is JSON and the vector its raw float32 bytes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

Op = Literal["add", "patch", "delete"]


@dataclass(frozen=True)
class Entry:
    op: Op
    id: str
    row: dict[str, Any] | None = None  # the row after the write, ``vector`` included; None for a delete
    columns: tuple[str, ...] = ()  # a patch's changed columns
    seq: int = 0  # given by the journal
    created_ms: int = 0

    def encoded(self) -> tuple[str, str | None, bytes | None, str]:
        """(op, row JSON without the vector, vector bytes, columns JSON) as the journal stores them."""
        if self.row is None:
            return self.op, None, None, "[]"
        plain = {key: value for key, value in self.row.items() if key != "vector"}
        vector = np.asarray(self.row["vector"], dtype="<f4").tobytes()
        return self.op, json.dumps(plain, ensure_ascii=False), vector, json.dumps(list(self.columns))

    @classmethod
    def decoded(cls, seq: int, op: str, memory_id: str, row: str | None, vector: bytes | None, columns: str | None,
                created_ms: int) -> Entry:
        full: dict[str, Any] | None = None
        if row is not None:
            full = json.loads(row)
            full["vector"] = np.frombuffer(bytes(vector or b""), dtype="<f4").astype(np.float32)
        return cls(op=op, id=memory_id, row=full, columns=tuple(json.loads(columns or "[]")),  # type: ignore[arg-type]
                   seq=seq, created_ms=created_ms)


@dataclass
class Plan:
    """The net effect of a run of entries on the table, per id, in the order a flush commits it."""

    deletes: list[str] = field(default_factory=list)
    adds: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> whole row
    patches: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> changed columns' values

    @property
    def rows(self) -> int:
        return len(self.deletes) + len(self.adds) + len(self.patches)


def fold(entries: Iterable[Entry]) -> Plan:
    """Entries in journal order, folded per id: a patch after an add is part of the add, a later patch of
    the same row joins the earlier one, and a delete wins over both (it also removes a row an interrupted
    flush may have committed already)."""
    plan = Plan()
    deleted: dict[str, None] = {}
    for entry in entries:
        if entry.op == "delete":
            plan.adds.pop(entry.id, None)
            plan.patches.pop(entry.id, None)
            deleted[entry.id] = None
        elif entry.row is None:
            continue
        elif entry.op == "add":
            deleted.pop(entry.id, None)
            plan.patches.pop(entry.id, None)
            plan.adds[entry.id] = dict(entry.row)
        elif entry.id in plan.adds:
            plan.adds[entry.id] = dict(entry.row)
        else:
            changed = plan.patches.setdefault(entry.id, {})
            changed.update({column: entry.row[column] for column in entry.columns if column in entry.row})
    plan.deletes = list(deleted)
    return plan


def patch_groups(patches: dict[str, dict[str, Any]]) -> list[tuple[tuple[str, ...], list[dict[str, Any]]]]:
    """Patches grouped by the columns they change: one commit a group, each row ``{"id", *columns}``."""
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for memory_id, values in patches.items():
        columns = tuple(sorted(values))
        groups.setdefault(columns, []).append({"id": memory_id, **values})
    return list(groups.items())


def ids_of(entries: Sequence[Entry]) -> list[str]:
    return list(dict.fromkeys(entry.id for entry in entries))
