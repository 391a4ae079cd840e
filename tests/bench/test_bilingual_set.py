"""The committed bilingual set stays what the quality bench's tables claim it is."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from app.memory.ranking import language, terms
from bench.data.bilingual import DATA_DIR, TYPES, half, load


def test_the_set_has_unique_ids_every_query_type_and_only_existing_answers() -> None:
    data = load()
    assert len(data.memories) >= 100 and len(data.queries) >= 80
    assert len({m.id for m in data.memories}) == len(data.memories)
    assert len({q.id for q in data.queries}) == len(data.queries)
    assert set(Counter(q.type for q in data.queries)) == set(TYPES)
    assert {m.lang for m in data.memories} == {"en", "zh-TW", "zh-CN"}


def test_cross_language_queries_are_written_in_the_other_language_than_their_answers() -> None:
    data = load()
    by_id = {m.id: m for m in data.memories}
    for query in data.queries:
        answers = {by_id[r].lang for r in query.relevant}
        if query.type == "zh-en":
            assert answers == {"en"} and language(query.text) in ("hans", "hant"), query.id
        elif query.type == "en-zh":
            assert answers <= {"zh-TW", "zh-CN"} and language(query.text) == "latin", query.id
        elif query.type == "zh-TW-CN":
            assert len(answers) == 1 and language(query.text) != {"zh-TW": "hant", "zh-CN": "hans"}[answers.pop()]


def test_a_query_naming_an_unknown_memory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "bilingual_memories.jsonl").write_text(
        (DATA_DIR / "bilingual_memories.jsonl").read_text(encoding="utf-8"), encoding="utf-8")
    query = {"id": "q1", "type": "en", "text": "anything", "relevant": ["m999"]}
    (tmp_path / "bilingual_queries.jsonl").write_text(json.dumps(query) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="m999"):
        load(tmp_path)


def test_reworded_queries_share_almost_no_term_with_their_answer_and_both_halves_hold_every_type() -> None:
    data = load()
    by_id = {m.id: m for m in data.memories}
    reworded = [q for q in data.queries if q.type.endswith("-reworded")]
    assert len(reworded) >= 45
    for query in reworded:
        answer = by_id[next(iter(query.relevant))]
        assert query.type == f"{answer.lang}-reworded", query.id
        shared = set(terms(query.text)) & set(terms(answer.text))
        assert len(shared) <= 2, (query.id, shared)  # at most incidental words ("after", 現在)
    for kind in TYPES:
        assert {half(q) for q in data.queries if q.type == kind} == {"even", "odd"}, kind
