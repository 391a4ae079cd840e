"""The team benchmark runs end to end on a small load (two instances on moto, hash embedder), and its JSON
holds every figure the targets are judged on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import team

pytestmark = pytest.mark.slow


def test_team_bench_on_two_instances_reports_remember_visibility_versions_and_the_baseline(tmp_path: Path) -> None:
    team.main(["--instances", "2", "--clients", "1", "--remembers", "12", "--settle-s", "5",
               "--results-dir", str(tmp_path), "--output", "smoke"])
    payload = json.loads((tmp_path / "smoke.json").read_text())
    measured = payload["team"]
    assert payload["load"] == {"instances": 2, "clients_per_instance": 1, "remembers": 12}
    assert measured["errors"]["refused"] == 0 and measured["errors"]["other"] == 0
    assert measured["commits"] >= 1 and measured["flushers"] == 1 and measured["fragments_after_compaction"] >= 1
    assert measured["remember"]["n"] == 12
    assert 0 < measured["remember"]["p50_s"] <= measured["remember"]["p99_s"] <= measured["remember"]["max_s"]
    assert measured["visible"]["n"] >= 1 and measured["never_visible"] == 0
    assert measured["versions_at_end"] >= 2 and 1 <= measured["versions_kept"] <= measured["versions_at_end"]
    alone = payload["lancedb_alone"]
    assert alone["append"]["n"] == 12 and alone["errors"] == 0
    assert payload["remember_p50_vs_lancedb"] > 0
    assert set(payload["met"]) == set(team.TARGETS)
