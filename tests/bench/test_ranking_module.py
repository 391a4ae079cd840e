"""app.memory.ranking: the optional re-ranking measured by bench/locomo.py."""

from __future__ import annotations

from app.memory.ranking import Candidate, RankingOptions, bm25_scores, keyword_query, rerank, tokenize


def _ids(ranked: list[tuple[Candidate, float]]) -> list[str]:
    return [c.id for c, _ in ranked]


def test_default_options_keep_the_cosine_order() -> None:
    candidates = [Candidate("a", "alpha", 0.9), Candidate("b", "beta", 0.8), Candidate("c", "alpha beta", 0.7)]
    assert RankingOptions().is_identity
    assert _ids(rerank("alpha beta", candidates, RankingOptions())) == ["a", "b", "c"]


def test_a_query_sharing_no_word_with_any_memory_keeps_its_vector_order() -> None:
    candidates = [Candidate("a", "the cache layer failed after deploy", 0.61),
                  Candidate("b", "timestamps are stored in milliseconds", 0.60)]
    ranked = rerank("時間戳必須用毫秒", candidates, RankingOptions(lexical_weight=0.5))
    assert _ids(ranked) == ["a", "b"]
    assert [score for _, score in ranked] == [0.61, 0.60]


def test_lexical_weight_lifts_an_exact_identifier_over_a_slightly_closer_vector_hit() -> None:
    candidates = [Candidate("a", "the board moved a task to review", 0.62),
                  Candidate("b", "TASK-00012 is blocked on the migration", 0.60)]
    assert _ids(rerank("TASK-00012 status", candidates, RankingOptions(lexical_weight=0.1))) == ["b", "a"]


def test_a_small_lexical_weight_cannot_override_a_clear_vector_gap() -> None:
    candidates = [Candidate("a", "deploys happen on fridays", 0.90), Candidate("b", "status status status", 0.40)]
    assert _ids(rerank("status", candidates, RankingOptions(lexical_weight=0.1))) == ["a", "b"]


def test_chinese_runs_are_tokenized_as_bigrams_so_keyword_scores_find_substrings() -> None:
    assert tokenize("timestamp 必須用毫秒") == ["timestamp", "必須", "須用", "用毫", "毫秒"]
    scores = bm25_scores("毫秒", ["memory-mcp timestamp 必須用毫秒", "nothing related"])
    assert scores[0] > 0 and scores[1] == 0


def test_recency_weight_prefers_the_newer_of_two_equally_similar_memories() -> None:
    day = 86_400_000
    candidates = [Candidate("old", "x", 0.5, timestamp_ms=0), Candidate("new", "y", 0.5, timestamp_ms=60 * day)]
    ranked = rerank("q", candidates, RankingOptions(recency_weight=0.05), now_ms=60 * day)
    assert _ids(ranked) == ["new", "old"]


def test_the_keyword_query_keeps_content_words_once_and_drops_stop_words() -> None:
    assert keyword_query("When did the team move the board to the new server?") == "team move board new server"
    assert keyword_query("what is it") == "what is it"  # nothing but stop words: search the text as written
