"""Rows in memory-lancedb-pro's terms: its storage categories in the column, our tags in the metadata."""

from __future__ import annotations

import json
import time
import uuid

import lancedb
import numpy as np
import pytest

from app.memory import categories
from app.memory.service import MemoryService
from tests.support.catch_up import caught_up_async


@pytest.mark.parametrize(("tags", "expected"), [
    (["decision", "infra"], "decision"), (["infra", "Preferences"], "preference"), (["events"], "decision"),
    (["profile"], "fact"), (["infra", "db"], "other"), ([], "other"), (["reflection"], "reflection"),
])
def test_the_first_tag_naming_a_plugin_category_gives_the_column(tags: list[str], expected: str) -> None:
    assert categories.from_tags(tags) == expected
    assert expected in categories.STORAGE_CATEGORIES


async def test_remember_writes_a_plugin_category_and_keeps_every_tag_in_metadata(service: MemoryService) -> None:
    result = await service.remember("deploys go through the staging cluster first", tags=["infra", "decision"])
    await service.writer.flush()
    [raw] = service.store.get_rows([result.memory_id], ["category", "metadata"])
    assert raw["category"] == "decision"
    assert json.loads(raw["metadata"])["tags"] == ["infra", "decision"]
    memory = await service.get(result.memory_id)
    assert memory.category == "decision" and memory.tags == ["infra", "decision"]
    assert str(uuid.UUID(memory.id)) == memory.id


async def test_updating_tags_moves_the_category(service: MemoryService) -> None:
    result = await service.remember("tabs, never spaces", tags=["style"])
    updated = await service.update(result.memory_id, tags=["preference", "style"])
    assert updated.category == "preference" and updated.tags == ["preference", "style"]


async def _foreign_rows(service: MemoryService) -> None:
    """A plugin row and an earlier memory-mcp row (tags joined by commas in the column, no metadata tags),
    committed by another handle and read into the vector cache in the background."""
    dimension = service.embedder.dimension
    vector = np.zeros(dimension, dtype=np.float32)
    vector[0] = 1.0
    stamp = int(time.time() * 1000)
    table = lancedb.connect(str(service.settings.db_path)).open_table(service.settings.table)
    table.add([
        {"id": str(uuid.uuid4()), "text": "plugin fact", "vector": vector, "scope": "global", "category": "fact",
         "importance": 0.7, "timestamp": stamp, "metadata": "{}"},
        {"id": "abcd1234", "text": "legacy row", "vector": vector, "scope": "global", "category": "decision,infra",
         "importance": 0.7, "timestamp": stamp, "metadata": "{}"},
    ])
    assert await caught_up_async(service.store)


async def test_filters_and_stats_speak_the_plugins_categories(service: MemoryService) -> None:
    await service.remember("we chose PostgreSQL", tags=["decision", "db"])
    await service.remember("prefers dark mode", tags=["preferences"])
    await service.remember("a loose note", tags=["misc"])
    await _foreign_rows(service)
    stats = await service.stats()
    assert stats.categories == {"decision": 1, "preference": 1, "other": 2, "fact": 1}
    for name, count in stats.categories.items():
        listed = await service.list_memories(category=name, limit=50)
        assert len(listed) == count and {m.category for m in listed} == {name}


async def test_a_tag_filter_finds_metadata_tags_and_an_earlier_versions_column_tags(service: MemoryService) -> None:
    ours = await service.remember("the cache lives in redis", tags=["infra", "decision"])
    await service.remember("unrelated", tags=["infrastructure"])  # a longer tag is not the tag
    await service.remember("quoted tag", tags=['we "quote"'])
    await _foreign_rows(service)
    infra = {m.text for m in await service.list_facts(tag="infra")}
    assert infra == {"the cache lives in redis", "legacy row"}
    assert [m.id for m in await service.list_memories(category="infra")] != []
    assert {m.text for m in await service.list_facts(tag='we "quote"')} == {"quoted tag"}
    assert (await service.get(ours.memory_id)).tags == ["infra", "decision"]
    legacy = await service.get("abcd1234")  # an 8-character id of an earlier version still works
    assert legacy.category == "other" and legacy.tags == ["decision", "infra"]
