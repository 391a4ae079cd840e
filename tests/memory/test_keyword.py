"""Keyword search finds Chinese substrings and exact identifiers (the default FTS tokenizer cannot)."""

from __future__ import annotations

from app.memory.service import MemoryService


async def test_a_chinese_word_is_found_inside_a_mixed_sentence(service: MemoryService) -> None:
    target = await service.remember("memory-mcp timestamp 必須用毫秒，與 OpenClaw 格式一致")
    await service.remember("秒針與分針")
    hits = await service.keyword_search("毫秒")
    assert [h.id for h in hits] == [target.memory_id] and hits[0].score == 1.0


async def test_exact_identifiers_are_found_and_near_misses_are_not(service: MemoryService) -> None:
    target = await service.remember("TASK-00012 moved to review")
    await service.remember("TASK-00013 moved to review")
    assert [h.id for h in await service.keyword_search("TASK-00012")] == [target.memory_id]
    assert [h.id for h in await service.keyword_search("task-00012")] == [target.memory_id]


async def test_rows_with_every_term_rank_before_partial_matches(service: MemoryService) -> None:
    partial = await service.remember("deploy on friday")
    full = await service.remember("deploy the api on friday")
    hits = await service.keyword_search("api friday")
    assert [h.id for h in hits] == [full.memory_id, partial.memory_id]
    assert hits[0].score == 1.0 > hits[1].score > 0


async def test_a_chinese_sentence_finds_memories_sharing_its_words(service: MemoryService) -> None:
    target = await service.remember("時間戳必須用毫秒")
    hits = await service.keyword_search("毫秒格式")
    assert [h.id for h in hits] == [target.memory_id]


async def test_wildcards_in_the_query_are_literal_characters(service: MemoryService) -> None:
    target = await service.remember("coverage is 100% now")
    await service.remember("coverage is 1000 now")
    assert [h.id for h in await service.keyword_search("100%")] == [target.memory_id]
    assert await service.keyword_search("_") == []


async def test_keyword_search_respects_the_scope_and_the_limit(service: MemoryService) -> None:
    for i in range(4):
        await service.remember(f"needle {i}", agent="a")
    await service.remember("needle elsewhere", agent="b")
    hits = await service.keyword_search("needle", scope="agent:a", limit=3)
    assert len(hits) == 3 and all(h.scope == "agent:a" for h in hits)
    assert [h.text for h in hits] == ["needle 3", "needle 2", "needle 1"]
