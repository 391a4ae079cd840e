"""An append-only audit log of job triggers: who, the args, the outcome, the time taken.

One entry per trigger, written when its outcome is known, so an entry is never rewritten. With the
board on SQLite it is a JSONL file next to the board; with the board in PostgreSQL it is the
``job_audit`` table every instance shares. The log is for people reading it later.
"""

from __future__ import annotations

import json
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from app.kanban.backend import BoardDatabase

logger = logging.getLogger(__name__)


def audit_path(kanban_db: Path) -> Path:
    return kanban_db.with_name(kanban_db.name + ".job-audit.jsonl")


class JobAudit:
    """One JSON object per trigger; a failure to write is logged, never raised into a trigger."""

    def record(self, **fields: Any) -> None:
        self._append(json.dumps(fields, ensure_ascii=False, sort_keys=True), int(fields.get("at_ms") or 0))

    def _append(self, line: str, at_ms: int) -> None:
        raise NotImplementedError

    def entries(self) -> list[dict[str, Any]]:
        """Every entry, oldest first."""
        raise NotImplementedError

    def close(self) -> None:
        """Write what is still buffered."""


class FileAudit(JobAudit):
    """Appends one line per entry to a JSONL file; each line is written before ``record`` returns."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def _append(self, line: str, at_ms: int) -> None:
        try:
            with self._lock, self.path.open("a", encoding="utf-8") as log:
                log.write(line + "\n")
        except OSError:
            logger.exception("could not write the job audit log %s", self.path)

    def entries(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text(encoding="utf-8").splitlines() if line]


class TableAudit(JobAudit):
    """The same entries as rows of ``job_audit``, written by one background thread in trigger order.

    ``record`` is called on the event loop; a database that does not answer must not stall it.
    """

    def __init__(self, db: BoardDatabase) -> None:
        self._db = db
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="job-audit")

    def _append(self, line: str, at_ms: int) -> None:
        try:
            self._writer.submit(self._insert, line, at_ms)
        except RuntimeError:  # closed: the server is stopping
            logger.error("job audit entry after shutdown, not written: %s", line)

    def _insert(self, line: str, at_ms: int) -> None:
        try:
            with self._db.write() as conn:
                conn.execute("INSERT INTO job_audit (at_ms, entry) VALUES (?, ?)", (at_ms, line))
        except Exception:
            logger.exception("could not write the job audit entry to %s", self._db.location)

    def entries(self) -> list[dict[str, Any]]:
        with self._db.read() as conn:
            return [json.loads(r["entry"]) for r in conn.execute("SELECT entry FROM job_audit ORDER BY id")]

    def close(self) -> None:
        """Wait for the entries already recorded to be written."""
        self._writer.shutdown(wait=True)
