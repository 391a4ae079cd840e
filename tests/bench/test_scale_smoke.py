"""bench/scale.py runs end to end on a tiny table (hash embedder) and reports every figure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import scale

pytestmark = pytest.mark.slow


def test_scale_bench_restarts_a_server_and_reports_each_column(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    scale.main(["--sizes", "300", "--provider", "hash", "--queries", "6", "--results-dir", str(tmp_path),
                "--output", "smoke"])
    payload = json.loads((tmp_path / "smoke.json").read_text())
    [row] = payload["results"]
    assert row["rows"] == 300
    assert 0 < row["ready_s"] < scale.READY_TIMEOUT_S and 0 < row["first_ready_s"] < scale.READY_TIMEOUT_S
    assert 0 < row["recall_p50_ms"] <= row["recall_p99_ms"]
    assert row["numpy_p50_ms"] > 0 and row["ratio_to_numpy"] == pytest.approx(
        row["recall_p50_ms"] / row["numpy_p50_ms"], rel=0.01)
    assert row["rss_mb"] >= row["server_rss_mb"] > 0
    assert row["deleted_before_compaction"] > 0 and 0 < row["ready_after_compaction_s"] < scale.READY_TIMEOUT_S
    assert row["refused_after_first"] == row["refused_after_first_after_compaction"] == 0
    assert {"stop_first_s", "stop_unchanged_s", "stop_with_changes_s", "stop_after_compaction_s"} <= set(row)
    assert "slowest_recall_while_starting_ms" in capsys.readouterr().out
