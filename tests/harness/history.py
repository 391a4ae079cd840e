"""Jepsen-style history checker (RELIABILITY C.2): what clients were told versus what the table holds.

Every client appends one record per operation to its own JSONL file:
``(op, client_request_id, id|None, t_invoke, t_complete, outcome)`` where ``outcome`` is ``ok``
(acknowledged: REST 200 with an id, MCP result without isError), ``fail`` (a definite rejection:
4xx, or a 503 documented as "nothing written") or ``info`` (timeout, reset, crash: unknown).
After the run the table is reopened and :func:`check` asserts:

1. ``ok ⊆ final``: every acknowledged id is present;
2. ``fail ∩ final = ∅``: no rejected write left a row;
3. no ``id`` and no ``client_request_id`` appears twice in the final rows;
4. every final row is explained by an ``ok`` (with the same id) or an ``info``.

A final row is tied to its operation by the client request id written into its text
(:func:`tagged_text` / :func:`request_id_in`), so rows of writes whose answer was lost (``info``)
are recognised too.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import lancedb

Outcome = Literal["ok", "fail", "info"]
_TAG = re.compile(r"\[crid:([A-Za-z0-9_.\-]+)\]")


def tagged_text(client_request_id: str, body: str = "reliability write") -> str:
    """A memory text that names the operation that wrote it."""
    return f"{body} [crid:{client_request_id}]"


def request_id_in(text: str | None) -> str | None:
    match = _TAG.search(text or "")
    return match.group(1) if match else None


@dataclass
class Event:
    op: str
    client_request_id: str
    id: str | None
    t_invoke: float
    t_complete: float
    outcome: Outcome
    detail: str = ""

    @property
    def latency_s(self) -> float:
        return self.t_complete - self.t_invoke


class HistoryLog:
    """One client's append-only JSONL history (thread-safe, flushed per record so a crash keeps it)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a", encoding="utf-8")
        self._lock = threading.Lock()

    def record(self, event: Event) -> Event:
        with self._lock:
            self._file.write(json.dumps(asdict(event)) + "\n")
            self._file.flush()
        return event

    @contextmanager
    def invoke(self, op: str, client_request_id: str) -> Iterator[PendingOp]:
        """Time one operation; it is ``info`` unless the block sets ``ok``/``fail`` (an exception: ``info``)."""
        pending = PendingOp(op, client_request_id, time.time())
        try:
            yield pending
        finally:
            self.record(Event(op, client_request_id, pending.id, pending.t_invoke, time.time(),
                              pending.outcome, pending.detail))

    def close(self) -> None:
        self._file.close()


@dataclass
class PendingOp:
    op: str
    client_request_id: str
    t_invoke: float
    id: str | None = None
    outcome: Outcome = "info"
    detail: str = ""

    def ok(self, memory_id: str) -> None:
        self.id, self.outcome = memory_id, "ok"

    def fail(self, detail: str) -> None:
        self.outcome, self.detail = "fail", detail

    def info(self, detail: str) -> None:
        self.outcome, self.detail = "info", detail


def load_events(paths: Iterable[Path]) -> list[Event]:
    events: list[Event] = []
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                events.append(Event(**json.loads(line)))
    return events


def read_final_rows(db_path: Path, table: str = "memories") -> list[dict[str, Any]]:
    """Every row of the table through a fresh connection (what a restarted server would see)."""
    db = lancedb.connect(str(db_path), read_consistency_interval=timedelta(0))
    return db.open_table(table).to_arrow().select(["id", "text"]).to_pylist()


@dataclass
class Verdict:
    ok: int = 0
    fail: int = 0
    info: int = 0
    final_rows: int = 0
    info_present: int = 0
    violations: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (f"acknowledged={self.ok} present_of_acknowledged={self.ok - self._lost()} failed={self.fail} "
                f"indeterminate={self.info} (present {self.info_present}) final_rows={self.final_rows} "
                f"violations={len(self.violations)}")

    def _lost(self) -> int:
        return sum(1 for v in self.violations if v.startswith("lost"))


def check(events: list[Event], final_rows: list[dict[str, Any]], *, preexisting: Iterable[str] = ()) -> Verdict:
    """Apply the four rules; ``preexisting`` ids were in the table before the run and are ignored."""
    verdict = Verdict(final_rows=len(final_rows))
    before = set(preexisting)
    rows = [r for r in final_rows if r["id"] not in before]
    by_crid: dict[str, Event] = {}
    for event in events:
        if event.client_request_id in by_crid:
            verdict.violations.append(f"client bug: request id {event.client_request_id} used twice")
        by_crid[event.client_request_id] = event
        setattr(verdict, event.outcome, getattr(verdict, event.outcome) + 1)
    final_ids = Counter(str(r["id"]) for r in final_rows)
    row_crids = Counter(request_id_in(r.get("text")) for r in rows)
    verdict.violations += [f"duplicate id {i} ({n} rows)" for i, n in final_ids.items() if n > 1]
    verdict.violations += [f"duplicate write {c} ({n} rows)" for c, n in row_crids.items() if c and n > 1]
    for event in events:
        present = event.client_request_id in row_crids
        if event.outcome == "ok" and (event.id not in final_ids or not present):
            verdict.violations.append(f"lost acknowledged write {event.client_request_id} id={event.id}")
        elif event.outcome == "fail" and present:
            verdict.violations.append(f"rejected write {event.client_request_id} is present ({event.detail})")
        elif event.outcome == "info" and present:
            verdict.info_present += 1
    for row in rows:
        crid = request_id_in(row.get("text"))
        event = by_crid.get(crid or "")
        if event is None or event.outcome == "fail":
            verdict.violations.append(f"unexplained row {row['id']} ({crid})")
        elif event.outcome == "ok" and event.id != row["id"]:
            verdict.violations.append(f"row of {crid} has id {row['id']}, client was told {event.id}")
    return verdict


def percentiles(latencies: list[float], *quantiles: float) -> list[float]:
    """Nearest-rank percentiles in milliseconds."""
    ordered = sorted(latencies)
    if not ordered:
        return [float("nan") for _ in quantiles]
    return [ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))] * 1000 for q in quantiles]
