"""What one foreign commit costs the vector cache, by kind of change, against a full reload.

    python -m bench.lab.shared_table_costs                    # 10k and 100k rows of random 512-d vectors
    python -m bench.lab.shared_table_costs --sizes 1000

No model and no server: the table is written in process, a ``Store`` with its vector cache opens it,
and another OS process (``--foreign``) changes it with LanceDB alone, one kind of change at a time.
Each row of the table is the time the store then takes to bring its cache up to date
(``Store.refresh_cache`` plus, when that hands the work to the background thread, the wait for it),
the rows it read with their vectors, and whether it reloaded the whole table. Results go to
``bench/results/shared_table_costs.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from app.memory.embeddings.hashing import HashEmbedder
from app.memory.store import commits
from app.memory.store.table import Store
from app.settings import Settings
from bench.data.corpus import random_unit_vectors
from bench.support.common import machine_info, print_table, write_json

DIMENSION = 512
CHUNK = 20_000
REPO = Path(__file__).resolve().parents[2]


def _rows(vectors: np.ndarray, prefix: str) -> list[dict[str, Any]]:
    return [{"id": f"{prefix}{i:07d}", "text": f"memory {prefix}{i} about something worth keeping", "vector": v,
             "scope": "global" if i % 4 else "agent:x", "category": "bench", "importance": 0.5,
             "timestamp": 1_700_000_000_000 + i, "metadata": "{}"} for i, v in enumerate(vectors)]


def _plain(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**r, "vector": np.asarray(r["vector"]).tolist()} for r in rows]


def kinds(ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    """One foreign change of each kind, on rows spread over the table."""
    fresh = _plain(_rows(random_unit_vectors(101, DIMENSION, seed=5), f"f{uuid.uuid4().hex[:4]}"))
    one = random_unit_vectors(1, DIMENSION, seed=6)[0].tolist()
    return {
        "append 1 row": [{"kind": "add", "rows": fresh[:1]}],
        "delete 1 row": [{"kind": "delete", "where": f"id = '{ids[1]}'"}],
        "update importance of 1 row": [{"kind": "update", "where": f"id = '{ids[2]}'", "values": {"importance": 0.9}}],
        "update text and vector of 1 row": [{"kind": "update", "where": f"id = '{ids[3]}'",
                                             "values": {"text": "rewritten", "vector": one}}],
        "merge_insert 1 updated + 1 new": [{"kind": "merge", "rows": [{**fresh[1], "id": ids[4]}, fresh[2]]}],
        "append, update, delete (one beat)": [{"kind": "add", "rows": fresh[3:4]},
                                               {"kind": "update", "where": f"id = '{ids[5]}'",
                                                "values": {"importance": 0.1}},
                                               {"kind": "delete", "where": f"id = '{ids[6]}'"}],
        "burst of 100 appends": [{"kind": "add", "rows": [row]} for row in fresh[1:101]],
        "add a column": [{"kind": "add_column", "name": "source", "expression": "scope"}],
        "compaction (optimize)": [{"kind": "optimize"}],
        "a cached column changes type": [{"kind": "alter_type", "name": "importance"}],
    }


def foreign(db: Path, ops: list[dict[str, Any]]) -> None:
    """``ops`` done by another OS process with LanceDB alone (the tests' ``foreign_writer``)."""
    path = db.parent / "ops.json"
    path.write_text(json.dumps(ops))
    subprocess.run([sys.executable, "-m", "tests.memory.store.foreign_writer", str(db), f"@{path}"],
                   check=True, timeout=600, cwd=REPO)


def _catch_up(store: Store) -> dict[str, Any]:
    assert store.cache is not None and store.sync is not None  # noqa: S101 - opened with a cache
    sync, cache = store.sync, store.cache
    rows, reloads, background = sync.rows_read, cache.reloads, sync.background_runs
    started = time.perf_counter()
    store.refresh_cache()
    inline_s = time.perf_counter() - started
    sync.wait_idle(600)
    total_s = time.perf_counter() - started
    return {"ms": round(total_s * 1000, 2), "search_thread_ms": round(inline_s * 1000, 2),
            "rows_read": sync.rows_read - rows, "full_reloads": cache.reloads - reloads,
            "background": sync.background_runs - background, "current": cache.is_current(store.version())}


def run_size(size: int, tmp: Path) -> dict[str, Any]:
    db = tmp / f"size-{size}" / "lancedb"
    settings = Settings(db_path=db, embedding_provider="hash", embedding_dimensions=DIMENSION)  # type: ignore[call-arg]
    embedder = HashEmbedder(DIMENSION)
    plain = Store.open(settings.model_copy(update={"vector_cache": False}), embedder)
    for start in range(0, size, CHUNK):
        vectors = random_unit_vectors(min(CHUNK, size - start), DIMENSION, seed=start)
        plain.table.add(commits.to_arrow(_rows(vectors, f"r{start}-"), plain.table.schema))
    plain.optimize()
    plain.table.add(commits.to_arrow(_rows(random_unit_vectors(10, DIMENSION, seed=1), "tail-"), plain.table.schema))
    store = Store.open(settings, embedder)
    assert store.cache is not None  # noqa: S101
    out: dict[str, Any] = {"size": size, "load_s": round(store.cache.last_reload_s, 3)}
    started = time.perf_counter()
    store.cache.reload(store.table)
    out["lancedb_reload_s"] = round(time.perf_counter() - started, 3)
    ids = [r["id"] for r in store.scan(None, ["id"]).to_pylist()]
    spread = [ids[int(i)] for i in np.linspace(0, len(ids) - 1, 8)]
    out["kinds"] = {}
    for kind, ops in kinds(spread).items():
        foreign(db, ops)
        out["kinds"][kind] = _catch_up(store)
    return out


def report(payload: dict[str, Any]) -> None:
    sizes = payload["sizes"]
    cols = ["foreign change", *(f"{s['size']:,}: ms / rows read / reloads" for s in sizes)]
    rows = [[kind, *(f"{s['kinds'][kind]['ms']} / {s['kinds'][kind]['rows_read']} / {s['kinds'][kind]['full_reloads']}"
                     for s in sizes)] for kind in sizes[0]["kinds"]]
    rows += [["full reload (pylance, at start-up)", *(f"{s['load_s'] * 1000:.0f}" for s in sizes)],
             ["full reload (LanceDB query, as before)", *(f"{s['lancedb_reload_s'] * 1000:.0f}" for s in sizes)]]
    print_table("Bringing the vector cache up to date after one foreign commit", cols, rows)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000", help="table sizes, comma-separated")
    parser.add_argument("--results-dir", default=None, help="where the JSON goes (default bench/results)")
    args = parser.parse_args(argv)
    payload: dict[str, Any] = {"machine": machine_info(), "sizes": []}
    with tempfile.TemporaryDirectory(prefix="bench-costs-") as tmp:
        for size in sorted(int(s) for s in args.sizes.split(",") if s.strip()):
            payload["sizes"].append(run_size(size, Path(tmp)))
    report(payload)
    print(f"\nwrote {write_json('shared_table_costs', payload, Path(args.results_dir) if args.results_dir else None)}")
    return payload


if __name__ == "__main__":
    main()
