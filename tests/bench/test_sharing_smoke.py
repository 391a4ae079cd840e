"""The sharing benchmark's other-writer part runs end to end on a tiny table (hash embedder), and its JSON is
complete."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import sharing

pytestmark = pytest.mark.slow


def test_other_writer_on_300_memories_reports_both_phases_and_the_foreign_rows(tmp_path: Path) -> None:
    sharing.main(["other-writer", "--provider", "hash", "--sizes", "300", "--seconds", "3", "--recallers", "1",
                  "--rememberers", "2", "--cache-dir", str(tmp_path / "cache"), "--results-dir", str(tmp_path),
                  "--output", "smoke", "--interval", "0.2", "--compact"])
    payload = json.loads((tmp_path / "smoke.json").read_text())
    [size] = payload["sizes"]
    assert size["size"] == 300 and size["bulk_load"]["rows"] == 300
    for name in ("quiet", "shared"):
        phase = size[name]
        assert phase["errors"] == 0 and phase["first_errors"] == [], name
        assert phase["recall"]["n"] > 0 and phase["remember"]["n"] > 0
        assert 0 < phase["recall"]["p50_ms"] <= phase["recall"]["p99_ms"]
    foreign = size["shared"]["foreign"]
    writes = foreign["writes"]
    assert writes["append"] > sharing.BURST and writes["update"] >= 1 and writes["delete"] >= 1
    assert writes["compact"] == 1
    assert writes["errors"] == 0 and foreign["never_recallable"] == 0
    assert foreign["recallable"]["n"] >= 2  # the beat's rows and the burst's last
    assert 0 < foreign["recallable"]["p99_s"] < sharing.RECALLABLE_TIMEOUT_S
    assert all(value > 0 for value in size["ratios"].values())
