"""Other processes on the same table, for ``bench.sharing``: memory-lancedb-pro's writer as modelled here, a
writer that takes no lock, and the plugin's lock held.

    python -m bench.support.neighbours foreign-writer DB POOL SECONDS TICK_S [compact]
    python -m bench.support.neighbours appender DB SECONDS TICK_S

``POOL`` is a JSON list of texts with their vectors in ``POOL.npy`` (what the foreign writer appends).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from app.memory.store.locks import LOCK_DIR_NAME
from bench.support.common import percentile

REPO = Path(__file__).resolve().parents[2]
BURST = 100  # rows the foreign writer appends at once, halfway through


def foreign_writer(db: str, pool_path: str, seconds: float, tick_s: float = 0.5, compact: bool = False) -> int:
    """Write the table like memory-lancedb-pro for ``seconds``; one JSON line per append on stdout."""
    import lancedb

    from app.memory.store.commits import is_retryable
    from app.memory.store.locks import WriteLock

    pool = json.loads(Path(pool_path).read_text())
    vectors = np.load(pool_path + ".npy")
    table = lancedb.connect(db).open_table("memories")
    lock = WriteLock(Path(db), timeout_s=60)
    existing = table.search().select(["id"]).limit(None).to_arrow()["id"].to_pylist()
    rng = random.Random(7)  # noqa: S311 - a workload, not a secret
    victims = rng.sample(existing, min(len(existing), int(seconds / tick_s) + 10))
    victim = iter(victims * 2)
    counts = {"append": 0, "update": 0, "delete": 0, "compact": 0, "errors": 0}
    held: dict[str, list[float]] = {kind: [] for kind in counts}
    used = 0

    def commit(kind: str, change: Any) -> None:
        for attempt in range(8):
            try:
                with lock.hold():
                    taken = time.perf_counter()
                    change()
                    held[kind].append(time.perf_counter() - taken)
                counts[kind] += 1
                return
            except Exception as exc:  # noqa: BLE001 - counted; the benchmark reports it
                if attempt == 7 or not is_retryable(exc):
                    counts["errors"] += 1
                    print(json.dumps({"error": f"{kind}: {exc}"}), flush=True)
                    return
            time.sleep(0.02 * 2**attempt)  # back-off outside the lock, as the plugin's retries do

    def append(probe: bool = True) -> None:
        nonlocal used
        text, vector = pool[used % len(pool)], vectors[used % len(pool)]
        used += 1
        row = {"id": str(uuid.uuid4()), "text": text, "vector": vector.tolist(), "scope": "global",
               "category": "fact", "importance": 0.7, "timestamp": int(time.time() * 1000),
               "metadata": json.dumps({"source": "memory-lancedb-pro"})}
        commit("append", lambda: table.add([row]))
        print(json.dumps({"id": row["id"], "text": text, "t": time.time(), "probe": probe}), flush=True)

    print(json.dumps({"ready": True}), flush=True)
    start = time.monotonic()
    tick, burst_done = 0, False
    while time.monotonic() - start < seconds:
        kind = ("append", "update", "delete")[tick % 3]  # one commit a beat
        if kind == "append":
            append()
        elif kind == "update":
            if tick % 2:
                values: dict[str, Any] = {"importance": round(rng.random(), 3)}
            else:
                values = {"text": pool[(used + 7) % len(pool)], "vector": vectors[(used + 7) % len(pool)].tolist()}
            target = next(victim)
            commit("update", lambda t=target, v=values: table.update(where=f"id = '{t}'", values=v))
        else:
            doomed = next(victim)
            commit("delete", lambda t=doomed: table.delete(f"id = '{t}'"))
        if compact and not counts["compact"] and time.monotonic() - start >= seconds / 4:
            commit("compact", lambda: table.optimize())  # as the plugin's index fold does, under its lock
        if not burst_done and time.monotonic() - start >= seconds / 2:
            burst_done = True
            burst_start = time.time()
            for i in range(BURST):
                append(probe=i == BURST - 1)  # the burst is recallable when its last row is
            print(json.dumps({"burst": [burst_start, time.time()]}), flush=True)
        tick += 1
        time.sleep(max(0.0, start + tick * tick_s - time.monotonic()))  # the plugin's pace, not a sync
    elapsed = time.monotonic() - start
    print(json.dumps({"done": counts, "held_ms": {k: {"p50": round(percentile([v * 1000 for v in h], 50), 1),
                                                     "max": round(max(h) * 1000, 1)} for k, h in held.items() if h},
                      "lock_share": round(sum(map(sum, held.values())) / elapsed, 3)}), flush=True)
    return 0


def appender(db: str, seconds: float, tick_s: float) -> int:
    """Append a row every ``tick_s`` without any lock, as a writer that ignores it would."""
    import lancedb

    table = lancedb.connect(db).open_table("memories")
    dimension = table.schema.field("vector").type.list_size
    start = time.monotonic()
    tick = 0
    while time.monotonic() - start < seconds:
        vector = np.random.default_rng(tick).standard_normal(dimension).astype(np.float32)
        table.add([{"id": str(uuid.uuid4()), "text": f"appended without a lock {tick}", "vector": vector.tolist(),
                    "scope": "global", "category": "fact", "importance": 0.5, "timestamp": int(time.time() * 1000),
                    "metadata": "{}"}])
        tick += 1
        time.sleep(max(0.0, start + tick * tick_s - time.monotonic()))  # the writer's pace, not a sync
    return 0


@contextlib.contextmanager
def plugin_lock(db: Path, after_s: float, held_s: float) -> Iterator[None]:
    """Take the plugin's lock directory ``after_s`` into the phase, for ``held_s``."""
    stop = threading.Event()

    def hold() -> None:
        if stop.wait(after_s):
            return
        while True:
            try:
                os.mkdir(db / LOCK_DIR_NAME)
                break
            except FileExistsError:  # our flusher holds it: the plugin retries, as proper-lockfile does
                time.sleep(0.01)
        stop.wait(held_s)
        os.rmdir(db / LOCK_DIR_NAME)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(held_s + 5)


@contextlib.contextmanager
def child(*argv: str) -> Iterator[subprocess.Popen[bytes]]:
    """``python *argv`` for the length of the block (its output dropped), then terminated."""
    process = subprocess.Popen([sys.executable, *argv], cwd=REPO, stdout=subprocess.DEVNULL)
    try:
        yield process
    finally:
        process.terminate()
        process.wait(20)


def main(argv: list[str]) -> int:
    if argv[:1] == ["foreign-writer"]:
        return foreign_writer(argv[1], argv[2], float(argv[3]), float(argv[4]), argv[5:6] == ["compact"])
    if argv[:1] == ["appender"]:
        return appender(argv[1], float(argv[2]), float(argv[3]))
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
