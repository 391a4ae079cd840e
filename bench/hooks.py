"""Claude Code hooks: ``memory-mcp hook recall``'s latency as Claude Code runs it, and its floor's two rates.

```
.venv/bin/python -m bench.hooks                  # latency: hash embedder, 20 runs
.venv/bin/python -m bench.hooks --provider local --runs 10
.venv/bin/python -m bench.hooks --floor          # the floor: local model, the bilingual set
```

``--floor`` remembers the bilingual set's 120 notes, recalls as the hook does (top 5) and applies the
hook's own rule (:func:`app.cli.hook_floor.shown`) at each floor: ``keep`` is the share of queries whose
right note came first and is shown; ``silent`` the share of the 60 off-topic prompts
(``bench/data/offtopic_prompts.jsonl``: cooking, travel, sport, in English and both Chinese scripts)
for which the hook prints nothing. The default floor must keep >= 90 % and stay silent >= 90 %.

Without ``--floor``:

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

from app.cli.hook_floor import DEFAULT_MIN_SCORE, shown
from bench.support.common import latency_summary_ms, machine_info, print_table, write_json
from bench.support.server import serve

NOTE = "the staging database is reset every Monday at 06:00 UTC"
PROMPT = "when is the staging database reset?"


def _timed(argv: list[str], env: dict[str, str], stdin: bytes = b"") -> tuple[float, bytes]:
    started = time.perf_counter()
    done = subprocess.run(argv, input=stdin, capture_output=True, env=env, check=True)
    return time.perf_counter() - started, done.stdout


FLOORS = (0.10, 0.12, 0.14, 0.15, 0.16, 0.17, 0.18, 0.20, 0.25, 0.30)
OFFTOPIC = Path(__file__).resolve().parent / "data" / "offtopic_prompts.jsonl"


Views = list[tuple[str, list[dict[str, Any]]]]  # (prompt, the hits the hook is given)


async def _floor_hits(provider: str) -> tuple[Views, Views]:
    """The hook's view (top 5) for queries whose right note came first, and for the off-topic prompts."""
    from app.memory.embeddings.registry import create_embedder
    from app.memory.service import MemoryService
    from app.settings import Settings
    from bench.data.bilingual import load
    from bench.support.common import CachingEmbedder

    data = load()
    offtopic = [json.loads(line)["text"] for line in OFFTOPIC.read_text(encoding="utf-8").splitlines() if line]
    with tempfile.TemporaryDirectory(prefix="bench-floor-") as tmp:
        settings = Settings(db_path=Path(tmp) / "lancedb", kanban_db=Path(tmp) / "kanban.sqlite3",
                            embedding_provider=provider)
        embedder = CachingEmbedder(create_embedder(settings))
        async with MemoryService.open(settings, embedder=embedder) as service:
            to_set_id = {}
            for memory in data.memories:
                to_set_id[(await service.remember(memory.text, scope="custom:floor")).memory_id] = memory.id

            async def view(prompt: str) -> list[dict[str, Any]]:
                found = await service.recall(prompt, top_k=5, scope="custom:floor")
                return [{"id": to_set_id.get(hit.id), "text": hit.text, "score": hit.score} for hit in found.hits]

            right_first = []
            for query in data.queries:
                hits = await view(query.text)
                if hits and hits[0]["id"] in query.relevant:
                    right_first.append((query.text, hits))
            unrelated = [(prompt, await view(prompt)) for prompt in offtopic]
        await embedder.close()
    return right_first, unrelated


def floor_rates(provider: str) -> dict[str, Any]:
    """Keep and silent rates of the hook's rule at each floor (see the module docstring)."""
    import asyncio

    right_first, unrelated = asyncio.run(_floor_hits(provider))
    rows = []
    for floor in sorted({*FLOORS, DEFAULT_MIN_SCORE}):
        keep = sum(hits[0] in shown(prompt, hits, floor) for prompt, hits in right_first) / len(right_first)
        silent = sum(not shown(prompt, hits, floor) for prompt, hits in unrelated) / len(unrelated)
        marker = "default" if floor == DEFAULT_MIN_SCORE else ""
        rows.append([floor, round(100 * keep, 1), round(100 * silent, 1), marker])
    print_table(f"hook floor, provider {provider}: {len(right_first)} queries with the right note first, "
                f"{len(unrelated)} off-topic prompts", ["floor", "keep %", "silent %", ""], rows)
    result = {"machine": machine_info(), "provider": provider, "default": DEFAULT_MIN_SCORE,
              "right_first": len(right_first), "offtopic": len(unrelated),
              "rows": [dict(zip(["floor", "keep_pct", "silent_pct"], row[:3], strict=True)) for row in rows]}
    write_json("hooks_floor", result)
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--provider", default=None, help="embedding provider (latency: hash; --floor: local)")
    parser.add_argument("--floor", action="store_true", help="measure the floor's keep and silent rates instead")
    args = parser.parse_args(argv)
    if args.floor:
        return floor_rates(args.provider or "local")
    args.provider = args.provider or "hash"
    with tempfile.TemporaryDirectory(prefix="bench-hooks-") as tmp, \
            serve(Path(tmp) / "lancedb", Path(tmp) / "server.log", provider=args.provider) as server:
        httpx.post(f"{server.url}/api/lancedb/memories", json={"text": NOTE}, trust_env=False).raise_for_status()
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_MCP_")} | {"MEMORY_MCP_URL": server.url}
        event = json.dumps({"prompt": PROMPT}).encode()
        hook, bare, imports, hits = [], [], [], 0
        for _ in range(args.runs):
            seconds, out = _timed([sys.executable, "-m", "app.cli", "hook", "recall", "--min-score", "0"], env, event)
            hook.append(seconds)
            hits += NOTE in out.decode()
            bare.append(_timed([sys.executable, "-c", "pass"], env)[0])
            imports.append(_timed([sys.executable, "-c", "import app.cli.hooks"], env)[0])
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
