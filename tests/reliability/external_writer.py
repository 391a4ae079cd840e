"""An OpenClaw-style writer: another OS process appending straight to the LanceDB directory.

Run as ``python -m tests.reliability.external_writer DB COUNT HISTORY PREFIX``. It takes the same
cross-process lock the server takes (``app.memory.store.locks.WriteLock``: flock plus memory-lancedb-pro's
``<db>/.memory-write.lock`` mkdir lock) around every ``table.add``, retries Lance's transient commit
conflicts like the server does, and logs each write to its own history file for the checker.
"""

from __future__ import annotations

import json
import random
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import lancedb
import numpy as np

from app.memory.store.commits import is_retryable
from app.memory.store.locks import WriteLock
from tests.harness.history import HistoryLog, tagged_text

ATTEMPTS = 8


def _row(text: str, dimension: int, rng: np.random.Generator) -> dict[str, object]:
    vector = rng.standard_normal(dimension).astype("float32")
    return {"id": str(uuid.uuid4()), "text": text, "vector": vector / np.linalg.norm(vector), "scope": "global",
            "category": "openclaw", "importance": 0.5, "timestamp": int(time.time() * 1000),
            "metadata": json.dumps({"agent": "openclaw", "source": "memory-lancedb-pro"})}


def _add(table: object, lock: WriteLock, row: dict[str, object]) -> None:
    delay = 0.02
    for attempt in range(1, ATTEMPTS + 1):
        try:
            with lock.hold():
                table.add([row])  # type: ignore[attr-defined]
                return
        except Exception as exc:
            if attempt == ATTEMPTS or not is_retryable(exc):
                raise
        time.sleep(delay * random.uniform(0.5, 1.5))  # noqa: S311 - back-off outside the lock, like the server
        delay = min(delay * 2, 1.0)


def main(db_path: str, count: int, history_path: str, prefix: str) -> int:
    table = lancedb.connect(db_path, read_consistency_interval=timedelta(0)).open_table("memories")
    dimension = table.schema.field("vector").type.list_size
    lock = WriteLock(Path(db_path), timeout_s=60)
    history = HistoryLog(Path(history_path))
    rng = np.random.default_rng()
    print("ready", flush=True)  # noqa: T201 - the parent waits for this line
    for i in range(count):
        crid = f"{prefix}-{i}"
        row = _row(tagged_text(crid, "external memory"), dimension, rng)
        with history.invoke("add", crid) as op:
            _add(table, lock, row)
            op.ok(str(row["id"]))
    history.close()
    print("done", flush=True)  # noqa: T201
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]))
