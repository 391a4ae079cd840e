"""The benchmarks still run end to end on a tiny slice (hash embedder), and their JSON is complete."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import hooks, speed
from bench.lab import locomo
from bench.support import common
from tests.bench.locomo_fixture import write_locomo

pytestmark = pytest.mark.slow


def _between_0_and_1(value: float) -> bool:
    return 0.0 <= value <= 1.0


def test_locomo_on_one_conversation_matches_exact_search_and_reports_every_metric(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMORY_MCP_LOCOMO", str(write_locomo(tmp_path / "locomo.json")))
    locomo.main(["--models", "hash", "--conversations", "1", "--max-turns", "200", "--no-cache",
                 "--keyword-pool", "20",
                 "--results-dir", str(tmp_path), "--output", "smoke"])
    payload = json.loads((tmp_path / "smoke.json").read_text())
    service = payload["service"]["hash"]
    assert service["exact_agreement"]["overlap@10_tie_aware"] == 1.0
    overall = service["quality"]["all"]
    assert overall["n"] == payload["questions"] > 20
    assert all(_between_0_and_1(overall[f"{m}@{k}"]) for m in ("hit", "frac") for k in (1, 5, 10))
    assert overall["hit@1"] <= overall["hit@5"] <= overall["hit@10"]
    assert overall["frac@10"] <= overall["hit@10"]
    methods = {e["method"] for e in payload["experiments"]}
    assert {"bm25", "exact:hash", "rrf:hash+bm25", "hybrid:hash+bm25", "rerank-union:hash+bm25"} <= methods
    assert payload["dataset"] == str(tmp_path / "locomo.json")
    bm25 = next(e for e in payload["experiments"] if e["method"] == "bm25")
    assert bm25["all"]["all"]["hit@10"] > 0.2  # lexical search finds evidence on LoCoMo; 0 would mean a bug
    assert service["timing"]["ingest_s"] > 0 and service["timing"]["recall_latency"]["p50_ms"] > 0


def test_speed_on_200_memories_reports_targets_for_both_server_variants(tmp_path: Path) -> None:
    speed.main(["--provider", "hash", "--sizes", "200", "--queries", "8", "--mcp-queries", "4", "--clients", "1,3",
                "--per-client", "2", "--writes", "80", "--writers", "16", "--write-seconds", "2",
                "--cache-dir", str(tmp_path / "cache"), "--results-dir", str(tmp_path), "--output", "smoke"])
    payload = json.loads((tmp_path / "smoke.json").read_text())
    [size] = payload["sizes"]
    assert size["size"] == 200 and size["bulk_load"]["rows"] == 200
    for search in ("store_search", "store_search_scoped", "vector_cache", "vector_cache_scoped"):
        assert size[search]["recall@10"] == 1.0, search
        assert size[search]["p50_ms"] > 0
    for variant in ("baseline", "cache"):
        part = size[variant]
        assert part["rest_recall"]["recall@10"] == 1.0
        assert part["mcp_recall"]["p50_ms"] > 0
        assert part["remember_concurrent"]["writes"] > 0 and part["remember_concurrent"]["errors"] == 0
        assert part["rss_peak_mb"] > 50
        assert [c["clients"] for c in part["concurrent_recall"]] == [1, 3]
        assert set(part["ratios"]) >= {"search_vs_numpy", "rest_vs_embed_plus_exact", "remember_per_s", "rss_mb"}


def test_locomo_without_the_dataset_says_where_to_put_it_and_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere" / "locomo10.json"
    monkeypatch.setenv("MEMORY_MCP_LOCOMO", str(missing))
    with pytest.raises(SystemExit) as exit_info:
        locomo.main(["--models", "hash", "--results-dir", str(tmp_path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert str(missing) in err and "MEMORY_MCP_LOCOMO" in err
    assert "Traceback" not in err and not list(tmp_path.glob("*.json"))


def test_the_hook_floor_bench_reports_both_rates_at_every_floor_with_the_default_among_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(common, "CACHE_DIR", tmp_path / "cache")
    monkeypatch.setattr(common, "RESULTS_DIR", tmp_path)
    result = hooks.main(["--floor", "--provider", "hash"])
    rows = result["rows"]
    assert result["default"] in [row["floor"] for row in rows]
    assert result["right_first"] > 0 and result["offtopic"] == 60
    keeps, silents = [row["keep_pct"] for row in rows], [row["silent_pct"] for row in rows]
    assert keeps == sorted(keeps, reverse=True) and silents == sorted(silents)  # a higher floor shows less
    assert json.loads((tmp_path / "hooks_floor.json").read_text())["rows"] == rows
