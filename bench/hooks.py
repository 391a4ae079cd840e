"""Claude Code hook latency: ``memory-mcp hook recall`` answering a hit, as Claude Code runs it.

```
.venv/bin/python -m bench.hooks                  # hash embedder, 20 runs
.venv/bin/python -m bench.hooks --provider local --runs 10
```

Starts ``memory-mcp serve`` on a temporary directory, remembers one note, then runs the hook ``--runs``
times as a fresh process with a prompt that finds it. Printed, p50 / p95 / max in ms:

- ``hook recall (whole process)``: spawn to exit, the block printed (the goal: <= 300 ms when idle);
- ``python -c pass``: the interpreter's own start, which the hook's budget does not count;
- ``import app.cli.hooks``: the start plus the hook's imports (standard library only).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import latency_summary_ms, machine_info, print_table, write_json
from bench.startup import _env, _free_port, _spawn, _stop, _timed_start

NOTE = "the staging database is reset every Monday at 06:00 UTC"
PROMPT = "when is the staging database reset?"


def _timed(argv: list[str], env: dict[str, str], stdin: bytes = b"") -> tuple[float, bytes]:
    started = time.perf_counter()
    done = subprocess.run(argv, input=stdin, capture_output=True, env=env, check=True)
    return time.perf_counter() - started, done.stdout


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--provider", default="hash")
    args = parser.parse_args(argv)
    checkout = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="bench-hooks-") as tmp:
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        process = _spawn(checkout, _env(Path(tmp), args.provider, port), Path(tmp) / "server.log")
        try:
            _timed_start(process, url, time.perf_counter())
            httpx.post(f"{url}/api/lancedb/memories", json={"text": NOTE}, trust_env=False).raise_for_status()
            env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_MCP_")} | {"MEMORY_MCP_URL": url}
            event = json.dumps({"prompt": PROMPT}).encode()
            hook, bare, imports, hits = [], [], [], 0
            for _ in range(args.runs):
                seconds, out = _timed([sys.executable, "-m", "app.cli", "hook", "recall", "--min-score", "0"], env,
                                      event)
                hook.append(seconds)
                hits += NOTE in out.decode()
                bare.append(_timed([sys.executable, "-c", "pass"], env)[0])
                imports.append(_timed([sys.executable, "-c", "import app.cli.hooks"], env)[0])
        finally:
            _stop(process)
    rows = []
    for name, values in (("hook recall (whole process)", hook), ("python -c pass", bare),
                         ("import app.cli.hooks", imports)):
        summary = latency_summary_ms(values)
        rows.append([name, summary["p50_ms"], summary["p95_ms"], round(max(values) * 1000, 1)])
    print_table(f"hook latency, {args.runs} runs, provider {args.provider}, hits {hits}/{args.runs}",
                ["what", "p50 ms", "p95 ms", "max ms"], rows)
    result = {"machine": machine_info(), "provider": args.provider, "runs": args.runs, "hits": hits,
              "rows": [dict(zip(["what", "p50_ms", "p95_ms", "max_ms"], row, strict=True)) for row in rows]}
    write_json("hooks", result)
    return result


if __name__ == "__main__":
    main()
