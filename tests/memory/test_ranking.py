"""Ranking: the pure re-ranking of ``app.memory.ranking`` and the hybrid recall built on it."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.memory.ranking import (
    POOL,
    Candidate,
    RankingOptions,
    bm25_scores,
    has_identifier,
    keyword_query,
    language,
    language_cap,
    rerank,
    same_language,
    stem,
    terms,
    tokenize,
)
from app.memory.service import MemoryService
from tests.conftest import SettingsFactory


def _ids(ranked: list[tuple[Candidate, float]]) -> list[str]:
    return [c.id for c, _ in ranked]


def test_a_zero_lexical_weight_keeps_the_cosine_order() -> None:
    candidates = [Candidate("a", "alpha", 0.9), Candidate("b", "beta", 0.8), Candidate("c", "alpha beta", 0.7)]
    assert RankingOptions().lexical_weight == 0
    assert _ids(rerank("alpha beta", candidates, RankingOptions())) == ["a", "b", "c"]


def test_a_query_sharing_no_word_with_any_memory_keeps_its_vector_order() -> None:
    candidates = [Candidate("a", "the cache layer failed after deploy", 0.61),
                  Candidate("b", "timestamps are stored in milliseconds", 0.60)]
    ranked = rerank("時間戳必須用毫秒", candidates, RankingOptions(lexical_weight=0.5))
    assert _ids(ranked) == ["a", "b"]
    assert [score for _, score in ranked] == pytest.approx([0.61 / 1.5, 0.60 / 1.5])  # no keyword share


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


def test_english_inflections_share_a_stem_so_a_question_finds_the_statement() -> None:
    assert {stem(w) for w in ("research", "researching", "researched", "researches")} == {"research"}
    assert stem("stories") == stem("story") and stem("running") == stem("runs") == "run"
    assert stem("loved") == stem("loving") == stem("love") and stem("glass") == "glass"
    assert terms("What did Caroline research?") == ["carolin", "research"]  # stems, not words
    assert terms("毫秒 TASK-00012") == ["毫秒", "task", "00012"]  # CJK bigrams and identifiers as they are
    scores = bm25_scores("What did Caroline research?", ["Caroline: Researching adoption agencies", "unrelated"])
    assert scores[0] > 0 and scores[1] == 0


def test_bm25_does_not_penalise_a_long_memory_for_its_length_by_default() -> None:
    short, long = "deploy notes", "deploy notes " + " ".join(f"filler{i}" for i in range(40))
    default = bm25_scores("deploy", [short, long])
    assert default[0] == default[1]
    normalised = bm25_scores("deploy", [short, long], b=0.75)
    assert normalised[0] > normalised[1]


def test_language_tells_english_simplified_and_traditional_chinese_apart() -> None:
    assert language("the cache layer failed after the deploy") == "latin"
    assert language("数据库连接池大小设为 20，再大就会触发告警") == "hans"
    assert language("資料庫連線池大小是多少") == "hant"
    assert language("环境变量 WORKER_CONCURRENCY 控制后台任务的并发数") == "hans"  # identifiers inside
    assert language("the 毫秒 field holds milliseconds") == "latin"  # one Chinese word in English
    assert language("中文") == "zh"  # no character that tells the two scripts apart
    assert language("キャッシュを再起動した") == "ja" and language("캐시를 다시 시작했다") == "ko"
    assert language("Кэш перезапущен") == "cyrillic" and language("12:30 -> 42") == ""


LOG_DISK = "事故：数据库服务器磁盘写满后变成只读，原因是慢查询日志没有轮转。"


def test_a_memory_in_another_language_gets_no_bonus_and_same_language_matches_stay_below_it() -> None:
    query = "日志服务器的磁盘为什么满了？"  # Simplified Chinese; the answer is an English note
    candidates = [Candidate("answer", "The log server's disk filled up because rotation only looked at size.", 0.55),
                  Candidate("shares-words", LOG_DISK, 0.50),
                  Candidate("other", "Deploys are frozen after 15:00 on Fridays.", 0.30)]
    uncapped = rerank(query, candidates, RankingOptions(lexical_weight=0.7, language_cap=False))
    assert _ids(uncapped)[0] == "shares-words"  # the failure the cap removes
    capped = rerank(query, candidates, RankingOptions(lexical_weight=0.7))
    assert _ids(capped) == ["answer", "shares-words", "other"]
    scores = dict((c.id, s) for c, s in capped)
    assert scores["answer"] == pytest.approx(0.55 / 1.7)  # no shared term: the cosine alone, no credit
    assert scores["other"] == pytest.approx(0.30 / 1.7)
    assert scores["shares-words"] <= scores["answer"]


def test_an_unrelated_memory_in_another_language_is_not_lifted_by_the_query_words_of_others() -> None:
    query = "部署之前要做什么"
    candidates = [Candidate("answer", "發版流程：先部署到預備環境，冒煙測試通過後由值班工程師手動核准上線。", 0.45),
                  Candidate("shares-a-word", "事故：部署腳本誤刪了上傳目錄，因為路徑變數是空字串。", 0.30),
                  Candidate("unrelated", "Analytics events are sampled at 10% on the client.", 0.073)]
    ranked = rerank(query, candidates, RankingOptions(lexical_weight=0.7))
    assert _ids(ranked)[-1] == "unrelated"
    assert dict((c.id, s) for c, s in ranked)["unrelated"] == pytest.approx(0.073 / 1.7)


def test_a_memory_sharing_only_an_incidental_word_gets_no_keyword_score() -> None:
    query = "how do we keep stale data out of a new release now"
    candidates = [Candidate("answer", "Cache keys include the schema version, so a deploy reads no old entry.", 0.5),
                  Candidate("incidental", "We now use pnpm.", 0.3)]
    assert _ids(rerank(query, candidates, RankingOptions(lexical_weight=0.7, coverage_floor=0.0)))[0] == "incidental"
    ranked = rerank(query, candidates, RankingOptions(lexical_weight=0.7))
    assert _ids(ranked) == ["answer", "incidental"]
    assert [s for _, s in ranked] == pytest.approx([0.5 / 1.7, 0.3 / 1.7])


def test_simplified_and_traditional_chinese_are_capped_as_two_languages() -> None:
    query = "資料庫連線池大小是多少？"  # Traditional; the answer is written in Simplified characters
    candidates = [Candidate("answer", "数据库连接池设为 20 个，再多就会触发告警。", 0.60),
                  Candidate("shares-words", "資料庫備份每天凌晨三點執行，每週一再做一次還原演練。", 0.50)]
    no_floor = RankingOptions(lexical_weight=0.7, coverage_floor=0.0)  # two shared bigrams: under the floor
    assert _ids(rerank(query, candidates, replace(no_floor, language_cap=False)))[0] == "shares-words"
    assert _ids(rerank(query, candidates, no_floor))[0] == "answer"


def test_a_query_naming_an_identifier_keeps_its_lexical_bonus_in_every_language() -> None:
    candidates = [Candidate("closer", "TASK-00112：登入頁面的驗證碼在深色模式下看不清楚。", 0.60),
                  Candidate("answer", "TASK-00047: the CSV export truncates customer names.", 0.50)]
    assert _ids(rerank("TASK-00047", candidates, RankingOptions(lexical_weight=0.7)))[0] == "answer"
    assert has_identifier("REDIS_URL") and has_identifier("p95") and has_identifier("X-API-KEY")
    assert not has_identifier("the on-call engineer keeps it read-only")  # hyphenated words are words


@given(st.lists(st.tuples(st.sampled_from(["deploy notes", "部署腳本", "部署脚本", "Кэш"]),
                          st.floats(-1, 1), st.floats(0, 1)), min_size=1, max_size=12),
       st.sampled_from(["deploy", "部署在哪", "部署在哪裡", "кэш"]))
def test_the_cap_only_lowers_same_language_scores_to_closer_other_language_ones(
        rows: list[tuple[str, float, float]], query: str) -> None:
    texts = [text for text, _, _ in rows]
    cosines = np.array([cos for _, cos, _ in rows])
    scores = np.array([s for _, _, s in rows])
    capped = language_cap(query, texts, cosines, scores)
    assert np.all(capped <= scores)
    mine = language(query)
    other = [not same_language(language(text), mine) for text in texts]
    for i in range(len(rows)):
        if other[i]:
            assert capped[i] == scores[i]
        else:
            closer = [scores[j] for j in range(len(rows)) if other[j] and cosines[j] > cosines[i]]
            assert capped[i] == min([scores[i], *closer])


def test_the_keyword_query_keeps_content_words_once_and_drops_stop_words() -> None:
    assert keyword_query("When did the team move the board to the new server?") == "team move board new server"
    assert keyword_query("what is it") == "what is it"  # nothing but stop words: search the text as written


# --- hybrid recall through the service (hash embedder, real LanceDB) --------------------------------

TARGET = "the migration ticket TASK-00042 waits on the database owner"
NEAR_MISSES = [f"status of TASK-000{n} on the board" for n in (41, 43, 44, 45, 46, 47)]
ENGLISH_NOTES = ["the cache layer failed after deploy", "timestamps are stored in milliseconds",
                 "deploy scripts live in the scripts folder", "back up the database every day"]


def _open(make_settings: SettingsFactory, weight: float | None) -> AbstractAsyncContextManager[MemoryService]:
    return MemoryService.open(make_settings(rank_lexical_weight=weight))


async def _fill(service: MemoryService, texts: list[str]) -> dict[str, str]:
    """Remember ``texts`` and flush them into the table, where ``_vector_rows`` ranks them."""
    ids = {(await service.remember(text)).memory_id: text for text in texts}
    await service.writer.flush()
    return ids


async def _vector_rows(service: MemoryService, query: str, limit: int) -> list[dict[str, Any]]:
    """The store's pure cosine ranking, the reference the hybrid is compared with."""
    return service.store.vector_search(await service.embedder.embed_query(query), None, limit)


async def test_hybrid_recall_puts_an_exact_identifier_first_that_the_vector_ranks_lower(
        make_settings: SettingsFactory) -> None:
    async with _open(make_settings, 1.0) as service:
        ids = await _fill(service, [*NEAR_MISSES, TARGET])
        target = next(i for i, text in ids.items() if text == TARGET)
        query = "status of TASK-00042"
        vector = await _vector_rows(service, query, 7)
        assert [row["id"] for row in vector].index(target) > 0  # the premise: by cosine alone it is not first
        hits = (await service.recall(query, top_k=3)).hits
    assert hits[0].id == target
    cosine = {row["id"]: row["score"] for row in vector}
    assert [hit.similarity for hit in hits] == pytest.approx([cosine[hit.id] for hit in hits], abs=1e-5)
    assert [hit.score for hit in hits] == sorted((hit.score for hit in hits), reverse=True)


async def test_a_keyword_only_candidate_beyond_the_vector_pool_is_found_with_its_cosine(
        make_settings: SettingsFactory) -> None:
    near_misses = [f"status of TASK-{n:05d} on the board" for n in range(100, 100 + POOL + 10)]
    query = "status of TASK-00042"
    async with _open(make_settings, 1.0) as service:
        # Every query word is in it, so the keyword pool (term coverage) ranks it first.
        ids = await _fill(service, [*near_misses, f"status: {TARGET}"])
        target = next(i for i, text in ids.items() if text.startswith("status:"))
        vector = await _vector_rows(service, query, len(ids))
        assert target not in {row["id"] for row in vector[:POOL]}  # only the keyword pool can bring it
        hits = (await service.recall(query, top_k=5)).hits
    assert hits[0].id == target
    assert hits[0].similarity == pytest.approx(next(r["score"] for r in vector if r["id"] == target), abs=1e-5)


async def test_above_the_keyword_pool_row_limit_only_the_vector_pool_is_reranked(
        make_settings: SettingsFactory) -> None:
    near_misses = [f"status of TASK-{n:05d} on the board" for n in range(100, 100 + POOL + 10)]
    query = "status of TASK-00042"
    settings = make_settings(rank_lexical_weight=1.0, rank_keyword_pool_max_rows=len(near_misses))
    async with MemoryService.open(settings) as service:
        ids = await _fill(service, [*near_misses, f"status: {TARGET}"])
        target = next(i for i, text in ids.items() if text.startswith("status:"))
        vector = await _vector_rows(service, query, len(ids))
        hits = (await service.recall(query, top_k=POOL)).hits
    # The store now holds more rows than the limit: no text scan, so the keyword-only memory stays out.
    assert target not in {hit.id for hit in hits}
    cutoff = vector[POOL - 1]["score"] - 1e-6  # the vector pool, ties at its edge included
    assert {hit.id for hit in hits} <= {row["id"] for row in vector if row["score"] >= cutoff}


async def test_a_chinese_query_over_english_notes_keeps_the_vector_order(make_settings: SettingsFactory) -> None:
    query = "部署腳本放在哪個目錄"
    async with _open(make_settings, 1.0) as service:
        await _fill(service, ENGLISH_NOTES)
        hybrid = (await service.recall(query, top_k=4)).hits
        vector = await _vector_rows(service, query, 4)
    assert [hit.id for hit in hybrid] == [row["id"] for row in vector]
    assert [hit.score for hit in hybrid] == pytest.approx([max(row["score"], 0) / 2 for row in vector], abs=1e-6)


@pytest.mark.parametrize("weight", [0.0, None], ids=["zero", "hash-default"])
async def test_lexical_weight_zero_gives_exactly_the_vector_order(make_settings: SettingsFactory,
                                                              weight: float | None) -> None:
    query = "status of TASK-00042"
    async with _open(make_settings, weight) as service:
        await _fill(service, [*NEAR_MISSES, TARGET])
        hits = (await service.recall(query, top_k=7)).hits
        vector = await _vector_rows(service, query, 7)
    assert [(hit.id, hit.score) for hit in hits] == [(row["id"], max(row["score"], 0.0)) for row in vector]


async def test_keyword_only_candidates_stay_inside_the_scope(make_settings: SettingsFactory) -> None:
    async with _open(make_settings, 1.0) as service:
        other = (await service.remember(TARGET, scope="project:other")).memory_id
        await _fill(service, NEAR_MISSES)
        hits = (await service.recall("TASK-00042", top_k=10, scope="global")).hits
    assert other not in {hit.id for hit in hits} and len(hits) == len(NEAR_MISSES)

