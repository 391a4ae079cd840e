"""Helpers shared by the benchmarks: timing, percentiles, tables, JSON results, machine facts."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = Path(os.environ.get("MEMORY_MCP_BENCH_RESULTS", BENCH_DIR / "results"))
CACHE_DIR = Path(os.environ.get("MEMORY_MCP_BENCH_CACHE", BENCH_DIR / "cache"))


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    if len(ordered) == 1:
        return float(ordered[0])
    rank = (len(ordered) - 1) * q / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return float(ordered[low] + (ordered[high] - ordered[low]) * (rank - low))


def latency_summary_ms(seconds: Sequence[float]) -> dict[str, float]:
    """p50/p95/mean in milliseconds of a list of durations in seconds."""
    ms = [s * 1000.0 for s in seconds]
    return {
        "p50_ms": round(percentile(ms, 50), 3),
        "p95_ms": round(percentile(ms, 95), 3),
        "mean_ms": round(statistics.fmean(ms), 3) if ms else float("nan"),
        "n": len(ms),
    }


@dataclass
class Stopwatch:
    """Accumulates wall time of the blocks it times."""

    total_s: float = 0.0
    laps: list[float] = field(default_factory=list)

    @contextmanager
    def time(self) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            self.total_s += elapsed
            self.laps.append(elapsed)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        if value != value:  # NaN
            return "-"
        return f"{value:.3f}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def format_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain fixed-width table, readable in a terminal and in a pasted report."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    line = "  ".join("-" * w for w in widths)
    out = [f"\n{title}", "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)), line]
    for row in cells:
        out.append("  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(row, widths, strict=True))))
    return "\n".join(out)


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    print(format_table(title, columns, rows), flush=True)


def machine_info() -> dict[str, Any]:
    """What the numbers were measured on, so results from two runs can be compared fairly."""
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    return info


def write_json(name: str, payload: dict[str, Any], results_dir: Path | None = None) -> Path:
    """Write ``<results>/<name>.json`` (the directory is gitignored) and return its path."""
    directory = results_dir or RESULTS_DIR
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2, sort_keys=False, default=_json_default) + "\n", encoding="utf-8")
    return path


def _json_default(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
