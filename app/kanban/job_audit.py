"""An append-only JSONL audit log of job triggers, next to the board: who, the args, the outcome, the time taken.

One line per trigger, written when its outcome is known, so a line is never rewritten. The log is
for people reading it later; nothing reads it back.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


def audit_path(kanban_db: Path) -> Path:
    return kanban_db.with_name(kanban_db.name + ".job-audit.jsonl")


class JobAudit:
    """Appends one JSON object per line; a failure to write is logged, never raised into a trigger."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def record(self, **fields: Any) -> None:
        line = json.dumps(fields, ensure_ascii=False, sort_keys=True) + "\n"
        try:
            with self._lock, self.path.open("a", encoding="utf-8") as log:
                log.write(line)
        except OSError:
            logger.exception("could not write the job audit log %s", self.path)
