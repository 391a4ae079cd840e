"""The MCP conformance suite (npm ``@modelcontextprotocol/conformance``) against a fresh server: its score.

```
.venv/bin/python -m bench.lab.conformance                 # the pinned suite version, every active scenario
.venv/bin/python -m bench.lab.conformance --scenario resources-subscribe
```

The suite and a Node.js it runs on (it needs 22 or later: ``fs.globSync``; the ``node`` package of the
npm registry ships one) are installed with npm into ``~/.cache/memory-mcp-tests/`` once. The server is
``memory-mcp serve`` on temp dirs with the ``hash`` embedder. Printed: each scenario passed or failed,
then ``N of M scenarios passed`` (the suite's own total counts checks, a scenario may hold two). Most
failures need the suite's fixtures (tools named ``test_image_content`` and the like, ``test://`` resources,
``test_*`` prompts), which a real server does not serve; docs/performance.md keeps the history.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.support.server import free_port, spawn_server

SUITE = "@modelcontextprotocol/conformance@0.1.16"
NODE = "node@22"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "memory-mcp-tests"
_RESULT = re.compile(r"^([✓✗]) (\S+): (\d+) passed, (\d+) failed$")


def npm_install(directory: Path, spec: str, marker: Path) -> None:
    if marker.exists():
        return
    npm = shutil.which("npm")
    if npm is None:
        sys.exit("npm is needed to install the conformance suite")
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run([npm, "install", "--prefix", str(directory), "--no-audit", "--no-fund", spec], check=True,
                   timeout=600)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", help="one scenario only")
    args = parser.parse_args()
    node_dir, suite_dir = CACHE / "node22", CACHE / "conformance"
    node = node_dir / "node_modules" / ".bin" / "node"
    npm_install(node_dir, NODE, node)
    cli = suite_dir / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
    npm_install(suite_dir, SUITE, cli)
    with tempfile.TemporaryDirectory(prefix="memory-mcp-conformance-") as tmp:
        data = Path(tmp)
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("MEMORY_MCP_")},
               "MEMORY_MCP_EMBEDDING_PROVIDER": "hash", "MEMORY_MCP_DB_PATH": str(data / "lancedb"),
               "MEMORY_MCP_KANBAN_DB": str(data / "kanban.sqlite3"), "MEMORY_MCP_LOG_FORMAT": "json"}
        with spawn_server(env, log_path=data / "server.log", port=free_port()) as server:
            command = [str(node), str(cli), "server", "--url", f"{server.url}/mcp", "-o", str(data / "results")]
            command += ["--scenario", args.scenario] if args.scenario else []
            done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    results = [m.groups() for m in map(_RESULT.match, done.stdout.splitlines()) if m]
    if not results:
        sys.exit(f"the suite printed no results:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    for mark, name, _, _ in results:
        print(f"{'pass' if mark == '✓' else 'FAIL'}  {name}")
    passed = sum(mark == "✓" for mark, *_ in results)
    print(f"{passed} of {len(results)} scenarios passed ({SUITE})")
    print(json.dumps({"suite": SUITE, "passed": passed, "scenarios": len(results)}))


if __name__ == "__main__":
    main()
