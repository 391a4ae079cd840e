"""Rows in memory-lancedb-pro's current format: its smart metadata on every row we write, kept by updates,
and its supersede fields written and read (MemoryService against a real LanceDB table, hash embedder)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from app.memory import smart_metadata
from app.memory.service import MemoryService

OLD = "the staging database listens on port 5433. It moved there in May."
NEW = "the staging database listens on port 6543 since the upgrade"


async def raw(service: MemoryService, memory_id: str) -> dict[str, Any]:
    """The row as the table holds it (what the plugin reads), once the journal is flushed into it."""
    await service.writer.flush()
    [row] = service.store.get_rows([memory_id], ["category", "timestamp", "metadata"])
    return {**row, "metadata": json.loads(row["metadata"])}


async def write_metadata(service: MemoryService, memory_id: str, metadata: dict[str, Any]) -> None:
    """Another writer (the plugin) changes the row's metadata in the table."""
    await service.writer.flush()
    service.store.update(memory_id, {"metadata": json.dumps(metadata)})


@pytest.mark.parametrize(("tags", "column", "smart"), [
    (["decision", "infra"], "decision", "events"), (["infra", "Preferences"], "preference", "preferences"),
    (["profile"], "fact", "profile"), (["fact"], "fact", "cases"), (["entity"], "entity", "entities"),
    (["cases"], "fact", "cases"), (["infra"], "other", "patterns"), ([], "other", "patterns"),
])
async def test_every_new_row_carries_the_plugins_smart_metadata_with_its_values(
        service: MemoryService, tags: list[str], column: str, smart: str) -> None:
    before = int(time.time() * 1000)
    result = await service.remember(OLD, tags=tags, agent="claude-code")
    row = await raw(service, result.memory_id)
    metadata = row["metadata"]
    assert row["category"] == column and metadata["memory_category"] == smart
    assert {k: metadata[k] for k in ("l0_abstract", "l1_overview", "l2_content")} == {
        "l0_abstract": "the staging database listens on port 5433.",
        "l1_overview": "- the staging database listens on port 5433.", "l2_content": OLD}
    assert {k: metadata[k] for k in ("tier", "state", "memory_layer", "source", "confidence", "access_count")} == {
        "tier": "working", "state": "confirmed", "memory_layer": "durable", "source": "manual", "confidence": 0.7,
        "access_count": 0}
    assert metadata["valid_from"] == metadata["last_accessed_at"] == row["timestamp"] >= before  # ms, not s
    assert metadata["origin"] == "memory-mcp" and metadata["tags"] == tags and metadata["agent"] == "claude-code"
    assert not smart_metadata.is_legacy(row["category"], metadata)


@pytest.mark.parametrize(("text", "l0"), [
    ("部署在週五。之後凍結", "部署在週五。"), ("no punctuation at all", "no punctuation at all"),
    ("x" * 150, "x" * 100), ("first line\nsecond line", "first line"), ("...dots first", "...dots first"),
])
def test_the_abstract_is_the_first_sentence_as_the_plugins_upgrader_cuts_it(text: str, l0: str) -> None:
    assert smart_metadata.abstract(text) == l0


async def test_an_update_keeps_what_the_plugin_wrote_and_follows_the_new_text_and_tags(service: MemoryService) -> None:
    memory_id = (await service.remember(OLD, tags=["infra"])).memory_id
    counted = {**(await raw(service, memory_id))["metadata"], "access_count": 4, "last_accessed_at": 1_780_000_000_000,
               "tier": "core", "l1_overview": "- a richer overview the plugin's LLM wrote"}
    await write_metadata(service, memory_id, counted)

    await service.update(memory_id, importance=0.9)
    kept = (await raw(service, memory_id))["metadata"]
    assert {k: kept[k] for k in ("access_count", "last_accessed_at", "tier", "l1_overview")} == {
        "access_count": 4, "last_accessed_at": 1_780_000_000_000, "tier": "core",
        "l1_overview": "- a richer overview the plugin's LLM wrote"}

    await service.update(memory_id, text=NEW, tags=["preference"])
    changed = await raw(service, memory_id)
    assert changed["category"] == "preference" and changed["metadata"]["memory_category"] == "preferences"
    assert changed["metadata"]["l0_abstract"] == NEW and changed["metadata"]["l2_content"] == NEW
    assert changed["metadata"]["l1_overview"] == f"- {NEW}" and changed["metadata"]["access_count"] == 4


async def test_an_earlier_versions_row_gets_the_metadata_on_its_next_update(service: MemoryService) -> None:
    memory_id = (await service.remember(OLD, tags=["decision"])).memory_id
    earlier = {"created": "2026-01-02T03:04:05.000Z", "tags": ["decision"], "agent": None,
               "embedding_model": "hash-bow-v1", "source": "memory-mcp"}
    await write_metadata(service, memory_id, earlier)
    assert smart_metadata.is_legacy("decision", (await raw(service, memory_id))["metadata"])

    await service.update(memory_id, importance=0.4)
    row = await raw(service, memory_id)
    assert not smart_metadata.is_legacy(row["category"], row["metadata"])
    assert row["metadata"]["source"] == "manual" and row["metadata"]["origin"] == "memory-mcp"
    assert row["metadata"]["memory_category"] == "events" and row["metadata"]["l2_content"] == OLD
    assert row["metadata"]["valid_from"] == row["timestamp"] and row["metadata"]["created"] == earlier["created"]


async def test_an_update_leaves_a_plugin_row_in_its_legacy_format_to_the_plugins_upgrader(
        service: MemoryService) -> None:
    memory_id = (await service.remember(OLD)).memory_id
    await write_metadata(service, memory_id, {"note": "the plugin's own legacy row"})
    await service.update(memory_id, importance=0.2)
    metadata = (await raw(service, memory_id))["metadata"]
    assert "memory_category" not in metadata and metadata["note"] == "the plugin's own legacy row"


async def test_supersede_writes_the_plugins_fields_and_forgetting_the_replacement_clears_them(
        service: MemoryService) -> None:
    old = (await service.remember(OLD)).memory_id
    new = (await service.remember(NEW, supersedes=old)).memory_id
    replaced, replacing = (await raw(service, old))["metadata"], (await raw(service, new))["metadata"]
    assert replaced["superseded_by"] == new and replaced["invalidated_at"] >= replaced["valid_from"]
    assert replaced["relations"] == [{"type": "superseded_by", "targetId": new}]
    assert replacing["supersedes"] == old and replacing["relations"] == [{"type": "supersedes", "targetId": old}]
    assert (await service.get(old)).invalidated_at == replaced["invalidated_at"]

    await service.forget(new)
    restored = (await raw(service, old))["metadata"]
    assert "superseded_by" not in restored and "invalidated_at" not in restored and restored["relations"] == []
    assert [hit.id for hit in (await service.recall("staging database port", top_k=3)).hits] == [old]


async def test_an_earlier_versions_row_superseded_gets_the_metadata_too(service: MemoryService) -> None:
    old = (await service.remember(OLD, tags=["fact"])).memory_id
    await write_metadata(service, old, {"tags": ["fact"], "source": "memory-mcp"})
    await service.remember(NEW, supersedes=old)
    metadata = (await raw(service, old))["metadata"]
    assert metadata["memory_category"] == "cases" and metadata["source"] == "manual" and "invalidated_at" in metadata


async def _ids(service: MemoryService, include_superseded: bool = False) -> set[str]:
    hits = (await service.recall("staging database port", top_k=5, include_superseded=include_superseded)).hits
    keyword = await service.keyword_search("staging", include_superseded=include_superseded)
    assert {hit.id for hit in keyword} == {hit.id for hit in hits}
    return {hit.id for hit in hits}


async def test_rows_the_plugin_superseded_or_invalidated_are_hidden_as_ours_are(service: MemoryService) -> None:
    old = (await service.remember(OLD)).memory_id
    archived = (await service.remember("the staging database had a replica, retired last year")).memory_id
    new = (await service.remember(NEW)).memory_id
    now = int(time.time() * 1000)
    # The plugin's storeSuperseding: the replaced row names its replacement and is invalidated.
    metadata = (await raw(service, old))["metadata"]
    await write_metadata(service, old, {**metadata, "superseded_by": new, "invalidated_at": now})
    # Its dreaming engine archives a duplicate: invalidated, no replacement named.
    await write_metadata(service, archived, {**(await raw(service, archived))["metadata"], "invalidated_at": now,
                                       "state": "archived", "memory_layer": "archive"})

    assert await _ids(service) == {new}
    assert await _ids(service, include_superseded=True) == {old, archived, new}
    listed = {m.id: (m.superseded_by, m.invalidated_at) for m in await service.list_memories()}
    assert listed == {old: (new, now), archived: (None, now), new: (None, None)}

    # Its replacement deleted by the plugin: still invalidated there, so still hidden here.
    service.store.delete(new)
    assert await _ids(service) == set()


async def test_an_invalidation_not_yet_in_effect_or_before_valid_from_hides_nothing(service: MemoryService) -> None:
    memory_id = (await service.remember(OLD)).memory_id
    metadata = (await raw(service, memory_id))["metadata"]
    await write_metadata(service, memory_id, {**metadata, "invalidated_at": int(time.time() * 1000) + 3_600_000})
    assert await _ids(service) == {memory_id}
    await write_metadata(service, memory_id, {**metadata, "invalidated_at": metadata["valid_from"] - 1})
    assert await _ids(service) == {memory_id}  # the plugin ignores it too (parseSmartMetadata)
