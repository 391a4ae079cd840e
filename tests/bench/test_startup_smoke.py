"""bench/startup.py runs end to end on a small table (hash embedder) and reports every figure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import startup

pytestmark = pytest.mark.slow


def test_startup_bench_times_a_start_and_a_restart_after_kill_9(tmp_path: Path) -> None:
    startup.main(["--runs", "1", "--rows", "200", "--provider", "hash", "--results-dir", str(tmp_path),
                  "--output", "smoke"])
    payload = json.loads((tmp_path / "smoke.json").read_text())
    assert payload["rows"] == 200 and list(payload["results"]) == ["this"]
    for case in ("start", "restart_after_kill_9"):
        part = payload["results"]["this"][case]
        assert part["runs"] == 1
        assert 0 < part["healthz_p50_s"] <= part["readyz_p50_s"] < startup.TIMEOUT_S
