"""The quality bench runs end to end on a generated LoCoMo slice and the bilingual set (hash embedder)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import quality
from bench.data.bilingual import GROUPS, TYPES, load
from tests.bench.locomo_fixture import write_locomo

pytestmark = pytest.mark.slow


def _metrics_are_sane(summary: dict[str, float]) -> bool:
    values = [summary[k] for k in ("mrr", "r@1", "r@5", "r@10")]
    return all(0.0 <= v <= 1.0 for v in values) and summary["r@1"] <= summary["r@5"] <= summary["r@10"]


def test_quality_reports_locomo_and_every_bilingual_query_type_for_the_service_and_each_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMORY_MCP_LOCOMO", str(write_locomo(tmp_path / "locomo.json", sessions=4)))
    # The hash embedder's own weight is 0; a lexical weight runs the stems and the language gate.
    quality.main(["--models", "hash", "--conversations", "1", "--no-cache", "--lexical-weight", "0.7",
                  "--results-dir", str(tmp_path), "--output", "smoke"])
    payload = json.loads((tmp_path / "smoke.json").read_text())
    service = payload["service"]["hash"]
    assert service["lexical_weight"] == 0.7
    locomo = service["locomo"]["all"]
    assert locomo["n"] == payload["questions"] > 20
    assert locomo["hit@1"] <= locomo["hit@5"] <= locomo["hit@10"] <= 1.0
    queries = load().queries
    for part in ("bilingual", "bilingual_pure_vector"):
        summary = service[part]
        assert set(summary) == {"all", *TYPES, *GROUPS}
        assert {t: summary[t]["n"] for t in TYPES} == {t: sum(q.type == t for q in queries) for t in TYPES}
        assert all(_metrics_are_sane(row) for row in summary.values())
    # Identifiers are what a lexical bonus is for: on hashed words the ranking must find more of them.
    assert service["bilingual"]["identifier"]["r@1"] > service["bilingual_pure_vector"]["identifier"]["r@1"]
    methods = [entry["method"] for entry in payload["lab"]]
    assert any(m.startswith("default:") for m in methods) and any("pseudo-relevance" in m for m in methods)
    assert {"bm25 (plain words, b 0.75)", "bm25 (stemmed, b 0)"} <= set(methods)
    default = next(entry for entry in payload["lab"] if entry["method"].startswith("default:"))
    # The lab replays the service's own pools and ranking: on the bilingual set (no identical texts
    # to collapse) it orders nearly every query exactly as the service did; hashed ties may swap.
    assert payload["lab_agrees_with_service"]["bilingual"] >= 0.9
    assert default["bilingual"]["all"]["mrr"] == pytest.approx(service["bilingual"]["all"]["mrr"], abs=0.02)
    assert [row["weight"] for row in payload["sweep"]] == [0.1, 0.3, 0.5, 0.7, 1.0]
    # Both halves, per type: the tuning half (even) and the held-out half (odd) add up to the whole.
    for part in ("bilingual", "locomo"):
        assert service[f"even_{part}"]["all"]["n"] + service[f"odd_{part}"]["all"]["n"] == service[part]["all"]["n"]
        assert default[f"even_{part}"]["all"]["n"] + default[f"odd_{part}"]["all"]["n"] == default[part]["all"]["n"]


def test_quality_without_the_dataset_says_where_to_put_it_and_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MEMORY_MCP_LOCOMO", str(tmp_path / "missing.json"))
    with pytest.raises(SystemExit) as exit_info:
        quality.main(["--models", "hash", "--results-dir", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "MEMORY_MCP_LOCOMO" in capsys.readouterr().err and not list(tmp_path.glob("*.json"))
