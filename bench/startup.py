"""Start-up time: a fresh server process to /healthz and to /readyz ready, and a restart after kill -9.

```
.venv/bin/python -m bench.startup                       # local model, 10k memories, 5 runs of each
.venv/bin/python -m bench.startup --runs 3 --rows 1000 --provider hash
.venv/bin/python -m bench.startup --compare ../old      # also another checkout, run for run (before/after)
```

Each run spawns ``python -m app.cli serve`` on a table of ``--rows`` memories (random unit vectors in the
provider's schema: start-up reads vectors, it does not care what they mean) and polls every 10 ms:

- ``start``: the process starts after a clean stop of the previous one;
- ``restart after kill -9``: a server is started, loaded, given a few remembers, killed with SIGKILL
  (its model child ends with it), and a new one is started at once on the same port and data.

Printed: p50 and max, over the runs, of the seconds from the spawn to /healthz answering 200 and to
/readyz answering 200 (model and vector cache loaded; polled every 50 ms, so that the probes do not slow
the start they measure). ``--compare`` also starts the server of another source tree with this
interpreter (e.g. a ``git worktree`` of an older commit), alternating run by run with this one, so both
see the same load on a shared machine.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from app.memory.embeddings import create_embedder
from app.settings import Settings
from bench.data import textgen
from bench.data.corpus import SCOPES, Corpus, bulk_load, random_unit_vectors
from bench.support import common

REPO = Path(__file__).resolve().parents[1]
POLL_S = 0.01  # /healthz, while connections are refused (cheap for the server)
READY_POLL_S = 0.05  # /readyz, which the starting server answers: fewer probes
TIMEOUT_S = 180.0
WRITES_BEFORE_KILL = 20


@dataclass
class Start:
    healthz_s: float
    readyz_s: float


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def prepare(data_dir: Path, provider: str, rows: int) -> dict[str, Any]:
    """A table of ``rows`` memories in the provider's schema (random vectors: start-up does not read meaning)."""
    settings = Settings(db_path=data_dir / "lancedb", embedding_provider=provider)  # type: ignore[arg-type]
    embedder = create_embedder(settings)  # for the table's identity and dimension only; never loaded
    texts = textgen.sentences(rows)
    scopes = [SCOPES[i % len(SCOPES)] for i in range(rows)]
    ids = [f"{i:08x}" for i in range(rows)]
    data = Corpus(texts, random_unit_vectors(rows, embedder.dimension, seed=rows), scopes, ids)
    return bulk_load(settings.db_dir or data_dir, data, embedder)


def _env(data_dir: Path, provider: str, port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_MCP_")}
    env.update({
        "MEMORY_MCP_DB_PATH": str(data_dir / "lancedb"), "MEMORY_MCP_KANBAN_DB": str(data_dir / "kanban.sqlite3"),
        "MEMORY_MCP_EMBEDDING_PROVIDER": provider, "MEMORY_MCP_PORT": str(port), "MEMORY_MCP_HOST": "127.0.0.1",
        "MEMORY_MCP_LOG_FORMAT": "text",
    })
    return env


def _spawn(checkout: Path, env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    with log_path.open("ab") as log:
        return subprocess.Popen([sys.executable, "-m", "app.cli", "serve"], cwd=checkout, env=env,
                                stdout=log, stderr=subprocess.STDOUT)


def _timed_start(process: subprocess.Popen[bytes], url: str, spawned: float) -> Start:
    """Seconds from ``spawned`` until /healthz, then /readyz, answer 200."""
    healthz_s: float | None = None
    with httpx.Client(timeout=2.0) as client:
        while time.perf_counter() - spawned < TIMEOUT_S:
            if process.poll() is not None:
                raise RuntimeError(f"the server exited with {process.returncode} while starting")
            path = "/healthz" if healthz_s is None else "/readyz"
            try:
                ok = client.get(url + path).status_code == 200
            except httpx.TransportError:
                ok = False
            if ok and healthz_s is None:
                healthz_s = time.perf_counter() - spawned
                continue
            if ok:
                return Start(healthz_s or 0.0, time.perf_counter() - spawned)
            # An external process: poll at about the resolution the figures are given in.
            time.sleep(POLL_S if healthz_s is None else READY_POLL_S)
    raise RuntimeError(f"the server did not get ready within {TIMEOUT_S} s")


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    process.wait(60)


def cold_start(checkout: Path, data_dir: Path, provider: str, log_path: Path) -> Start:
    port = _free_port()
    spawned = time.perf_counter()
    process = _spawn(checkout, _env(data_dir, provider, port), log_path)
    try:
        return _timed_start(process, f"http://127.0.0.1:{port}", spawned)
    finally:
        _stop(process)


def restart_after_kill(checkout: Path, data_dir: Path, provider: str, log_path: Path) -> Start:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = _env(data_dir, provider, port)
    first = _spawn(checkout, env, log_path)
    try:
        _timed_start(first, url, time.perf_counter())
        with httpx.Client(timeout=30.0) as client:
            for n in range(WRITES_BEFORE_KILL):
                client.post(f"{url}/api/lancedb/memories", json={"text": f"written before kill -9, {n}"})
    finally:
        first.kill()  # SIGKILL: no shutdown at all
        first.wait(30)
    spawned = time.perf_counter()
    second = _spawn(checkout, env, log_path)
    try:
        return _timed_start(second, url, spawned)
    finally:
        _stop(second)


def summary(starts: list[Start]) -> dict[str, Any]:
    healthz = [s.healthz_s for s in starts]
    readyz = [s.readyz_s for s in starts]
    return {
        "runs": len(starts),
        "healthz_p50_s": round(float(np.median(healthz)), 3), "healthz_max_s": round(max(healthz), 3),
        "readyz_p50_s": round(float(np.median(readyz)), 3), "readyz_max_s": round(max(readyz), 3),
        "healthz_s": [round(v, 3) for v in healthz], "readyz_s": [round(v, 3) for v in readyz],
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--provider", default="local")
    parser.add_argument("--compare", type=Path, default=None, help="another source tree, started alternately")
    parser.add_argument("--results-dir", type=Path, default=None)
    parser.add_argument("--output", default="startup")
    args = parser.parse_args(argv)
    checkouts = {"this": REPO, **({"compare": args.compare.resolve()} if args.compare else {})}
    starts: dict[str, dict[str, list[Start]]] = {name: {"start": [], "kill": []} for name in checkouts}
    load: list[float] = []
    with tempfile.TemporaryDirectory(prefix="memory-mcp-startup-") as tmp:
        data_dir = Path(tmp)
        loaded = prepare(data_dir, args.provider, args.rows)
        log_path = data_dir / "servers.log"
        for _ in range(args.runs):  # alternate the checkouts run by run: they see the same load
            for name, checkout in checkouts.items():
                load.append(os.getloadavg()[0])
                starts[name]["start"].append(cold_start(checkout, data_dir, args.provider, log_path))
                starts[name]["kill"].append(restart_after_kill(checkout, data_dir, args.provider, log_path))
    results = {name: {"checkout": str(checkouts[name]), "start": summary(parts["start"]),
                      "restart_after_kill_9": summary(parts["kill"])} for name, parts in starts.items()}
    payload = {"machine": common.machine_info(), "loadavg_1m": [round(v, 2) for v in load],
               "provider": args.provider, "rows": loaded["rows"], "results": results}
    common.print_table(
        f"start-up, {args.provider}, {loaded['rows']} memories, {args.runs} runs, s from spawn "
        f"(1-min load {min(load):.1f}-{max(load):.1f} on {os.cpu_count()} cpus)",
        ["checkout", "case", "healthz p50", "healthz max", "readyz p50", "readyz max"],
        [[name, case, part[case]["healthz_p50_s"], part[case]["healthz_max_s"], part[case]["readyz_p50_s"],
          part[case]["readyz_max_s"]] for name, part in results.items() for case in ("start", "restart_after_kill_9")])
    path = common.write_json(args.output, payload, args.results_dir)
    print(f"\nwrote {path}", flush=True)  # noqa: T201
    return payload


if __name__ == "__main__":
    main()
