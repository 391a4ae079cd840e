"""The bilingual zh/en evaluation set beside this file: agent memories and queries with their answers.

Memories are decisions, conventions, incidents, tool facts, tasks and settings of a software team, in
English, Traditional Chinese (zh-TW) and Simplified Chinese (zh-CN). Every query names its relevant
memories and its type:

- ``en``, ``zh-TW``, ``zh-CN``: a paraphrase in the memory's own language;
- ``zh-TW-CN``: the other Chinese script (Traditional query, Simplified memory, or the reverse);
- ``zh-en`` and ``en-zh``: cross-language (a Chinese query for an English memory, and the reverse);
- ``identifier``: a ticket id, environment variable, table or topic name, alone or with a few words;
- ``en-reworded``, ``zh-TW-reworded``, ``zh-CN-reworded``: paraphrases in the memory's language that
  share almost no word (English) or character bigram (Chinese) with it, written before the ranking was
  tuned on them; the words they do share are incidental ("after", "now", 現在), the case where a
  keyword bonus can only mislead.

``half(query)`` splits the queries by id parity: options are tuned on the even half and reported on
both, so the odd half shows what the tuning did not see.

Cross-language queries usually have same-language neighbours that share their words but not their
meaning (two disk-full incidents, two certificate incidents): a lexical bonus that cannot see the
other language lifts those over the answer, which is what the set is built to show.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent
TYPES = ("en", "zh-TW", "zh-CN", "zh-TW-CN", "zh-en", "en-zh", "identifier", "en-reworded", "zh-TW-reworded",
         "zh-CN-reworded")
CROSS_LANGUAGE = ("zh-en", "en-zh")
REWORDED = ("en-reworded", "zh-TW-reworded", "zh-CN-reworded")
#: Rolled-up query types reported beside the types themselves.
GROUPS = {"cross-language": CROSS_LANGUAGE, "reworded": REWORDED}


@dataclass(frozen=True)
class Memory:
    id: str
    lang: str
    kind: str
    text: str


@dataclass(frozen=True)
class Query:
    id: str
    type: str
    text: str
    relevant: frozenset[str]


@dataclass(frozen=True)
class BilingualSet:
    memories: list[Memory]
    queries: list[Query]


def half(query: Query) -> str:
    """'even' (the tuning half) or 'odd' (held out), by the query's number."""
    return "even" if int(query.id.lstrip("q")) % 2 == 0 else "odd"


def _read_jsonl(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def load(directory: Path | None = None) -> BilingualSet:
    """The set from ``bilingual_memories.jsonl`` and ``bilingual_queries.jsonl``.

    Raises:
        ValueError: a query of an unknown type, or naming a memory that does not exist.
    """
    folder = directory or DATA_DIR
    memories = [Memory(str(m["id"]), str(m["lang"]), str(m["kind"]), str(m["text"]))
                for m in _read_jsonl(folder / "bilingual_memories.jsonl")]
    known = {m.id for m in memories}
    queries = []
    for raw in _read_jsonl(folder / "bilingual_queries.jsonl"):
        relevant = frozenset(str(r) for r in raw["relevant"])  # type: ignore[union-attr]
        if raw["type"] not in TYPES or not relevant or not relevant <= known:
            raise ValueError(f"query {raw['id']}: bad type or relevant ids {sorted(relevant - known)}")
        queries.append(Query(str(raw["id"]), str(raw["type"]), str(raw["text"]), relevant))
    return BilingualSet(memories, queries)
