"""Ranking options replayed on cached vectors alone (no model, no service): LoCoMo and the bilingual set,
each reported on its tuning half and its held-out half, per query type.

    python -m bench.lab.ranking_tune                 # needs bench/cache filled by a run of bench.quality

LoCoMo halves are the even and odd conversations; bilingual halves the even and odd query numbers
(``bench.data.bilingual.half``). Options are chosen on the even halves; the odd halves show whether the
choice holds on what it was not chosen on.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from app.memory.embeddings.registry import create_embedder
from app.settings import Settings
from bench.data.bilingual import GROUPS, TYPES
from bench.data.bilingual import load as load_bilingual
from bench.data.locomo import load as load_locomo
from bench.lab import ranking_variants as rv
from bench.lab.ranking_options import bilingual_summary, locomo_summary
from bench.lab.replay import LabScope, Method, bilingual_scope, halve, locomo_scopes, pooled, vector_only
from bench.support.common import VectorCache, print_table

LOCOMO_TYPES = ("all", "multi-hop", "temporal", "open-domain", "single-hop")
BILINGUAL_TYPES = ("all", *TYPES, *GROUPS)


def cached_vectors(provider: str) -> Callable[[str, str, Sequence[str]], np.ndarray]:
    """(model, kind, texts) -> vectors from ``bench/cache`` (raises KeyError for a text never embedded)."""
    cache = VectorCache(create_embedder(Settings(embedding_provider=provider)).identity)

    def lookup(model: str, kind: str, texts: Sequence[str]) -> np.ndarray:
        found = cache.get(kind, texts)
        missing = [t for t, v in zip(texts, found, strict=True) if v is None]
        if missing:
            raise KeyError(f"{len(missing)} texts not in bench/cache, e.g. {missing[0]!r}: run bench.quality once")
        return np.stack([np.asarray(v, dtype=np.float32) for v in found])

    return lookup


def measure(method: Method, locomo: Sequence[LabScope], bilingual: LabScope) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("even", "odd"):
        out[f"locomo_{name}"] = locomo_summary(method, halve(locomo, name))
        out[f"bi_{name}"] = bilingual_summary(method, halve([bilingual], name))
    return out


def methods(model: str) -> list[tuple[str, Method]]:
    """Pure vector, the previous default, and the default's weight and coverage floor on a grid."""
    out: list[tuple[str, Method]] = [("pure vector", vector_only(model)),
                                     ("before: w 0.7, bm25/max, language gate with credit",
                                      pooled(model, rv.gated(0.7, "language")))]
    for weight in (0.7, 1.0):
        for floor in (0.0, 0.1, 0.15, 0.2, 0.3):
            out.append((f"w {weight}, coverage floor {floor}, language cap", pooled(model, rv.capped(weight, floor))))
    return out


def report(rows: list[tuple[str, dict[str, Any]]]) -> None:
    for half_name in ("even", "odd"):
        print_table(f"LoCoMo hit@5, {half_name} conversations", ("method", *LOCOMO_TYPES),
                    [[name, *(r[f"locomo_{half_name}"].get(t, {}).get("hit@5", float("nan")) for t in LOCOMO_TYPES)]
                     for name, r in rows])
        print_table(f"Bilingual MRR, {half_name} queries", ("method", *BILINGUAL_TYPES),
                    [[name, *(r[f"bi_{half_name}"].get(t, {}).get("mrr", float("nan")) for t in BILINGUAL_TYPES)]
                     for name, r in rows])


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="local")
    parser.add_argument("--only", default="", help="only methods whose name contains this")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    vectors = cached_vectors(args.model)
    locomo = locomo_scopes(load_locomo(), [args.model], vectors)
    bilingual = bilingual_scope(load_bilingual(), [args.model], vectors)
    print(f"scopes ready in {time.perf_counter() - start:.0f} s", flush=True)
    rows = [(name, measure(method, locomo, bilingual)) for name, method in methods(args.model)
            if args.only in name or name == "pure vector"]
    report(rows)
    print(f"wall {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
