"""Opening tables: memory-lancedb-pro tables as they are, and refusing vectors of another model."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import pyarrow as pa
import pytest

from app.memory.embeddings.hashing import HashEmbedder
from app.memory.errors import EmbeddingModelMismatch, MemoryNotFound
from app.memory.service import MemoryService
from app.memory.store import filters
from app.memory.store.schema import build_schema
from tests.conftest import SettingsFactory

DIM = 256


def _legacy_table(db_path: Path) -> list[str]:
    """A table shaped like memory-lancedb-pro's: full UUIDs, JSON metadata, float ms, an extra column."""
    schema = pa.schema([
        pa.field("id", pa.string()), pa.field("text", pa.string()), pa.field("vector", pa.list_(pa.float32(), DIM)),
        pa.field("category", pa.string()), pa.field("scope", pa.string()), pa.field("importance", pa.float64()),
        pa.field("timestamp", pa.float64()), pa.field("metadata", pa.string()), pa.field("source_app", pa.string()),
    ])
    rng = np.random.default_rng(7)
    ids = [str(uuid.uuid4()) for _ in range(3)]
    rows: list[dict[str, Any]] = []
    for i, memory_id in enumerate(ids):
        vector = rng.standard_normal(DIM).astype(np.float32)
        rows.append({
            "id": memory_id, "text": f"legacy memory {i}", "vector": (vector / np.linalg.norm(vector)).tolist(),
            "category": "fact", "scope": "global", "importance": 0.5, "timestamp": 1.7e12 + i,
            "metadata": json.dumps({"source": "openclaw", "l0": f"abstract {i}"}), "source_app": "openclaw",
        })
    db = lancedb.connect(str(db_path))
    db.create_table("memories", pa.Table.from_pylist(rows, schema=schema))
    return ids


def _snapshot(db_path: Path) -> tuple[pa.Schema, list[dict[str, Any]], int]:
    table = lancedb.connect(str(db_path), read_consistency_interval=timedelta(0)).open_table("memories")
    rows = sorted(table.to_arrow().to_pylist(), key=lambda r: r["id"])
    return table.schema, rows, table.version


async def test_a_memory_lancedb_pro_table_opens_unchanged(make_settings: SettingsFactory, tmp_path: Path) -> None:
    db_path = tmp_path / "lancedb"
    ids = _legacy_table(db_path)
    before = _snapshot(db_path)
    async with MemoryService.open(make_settings()) as service:
        memory = await service.get(ids[0])
        hits = (await service.recall("legacy memory", top_k=5)).hits
        listed = await service.list_memories()
        await service.stats()
    after = _snapshot(db_path)
    assert after == before
    assert memory.text == "legacy memory 0" and memory.timestamp == 1_700_000_000_000
    assert memory.tags == [] and memory.category == "fact"
    assert memory.metadata["source"] == "openclaw"
    assert {h.id for h in hits} == set(ids) and [m.id for m in listed] == list(reversed(ids))


async def test_full_uuid_ids_work_for_update_and_forget_and_new_rows_fit(make_settings: SettingsFactory,
                                                                         tmp_path: Path) -> None:
    db_path = tmp_path / "lancedb"
    ids = _legacy_table(db_path)
    vector_before = lancedb.connect(str(db_path)).open_table("memories").search().where(
        filters.eq("id", ids[1])).to_list()[0]["vector"]
    async with MemoryService.open(make_settings()) as service:
        updated = await service.update(ids[1], scope="project:p", importance=0.9)
        await service.forget(ids[2])
        new = await service.remember("written by memory-mcp", tags=["a"])
        with pytest.raises(MemoryNotFound):
            await service.get(ids[2])
        await service.writer.flush()  # the update, into the table
        assert updated.scope == "project:p" and service.store.get_vector(ids[1]).tobytes() == np.asarray(
            vector_before, dtype=np.float32).tobytes()
    rows = {r["id"]: r for r in lancedb.connect(str(db_path)).open_table("memories").to_arrow().to_pylist()}
    assert set(rows) == {ids[0], ids[1], new.memory_id}
    assert rows[new.memory_id]["source_app"] is None and isinstance(rows[new.memory_id]["timestamp"], float)


async def test_a_table_from_another_model_is_refused_naming_both(make_settings: SettingsFactory) -> None:
    async with MemoryService.open(make_settings()) as service:
        await service.remember("hash-embedded")

    class OtherModel(HashEmbedder):
        model = "other-model-v2"

    with pytest.raises(EmbeddingModelMismatch) as raised:
        async with MemoryService.open(make_settings(), embedder=OtherModel(DIM)):
            pass
    message = str(raised.value)
    assert "hash-bow-v1" in message and "other-model-v2" in message
    assert "MEMORY_MCP_EMBEDDING_PROVIDER" in message and "MEMORY_MCP_DB_PATH" in message


async def test_a_table_of_another_dimension_is_refused(make_settings: SettingsFactory) -> None:
    async with MemoryService.open(make_settings()):
        pass
    with pytest.raises(EmbeddingModelMismatch, match="512-d"):
        async with MemoryService.open(make_settings(), embedder=HashEmbedder(512)):
            pass


async def test_a_legacy_table_of_another_dimension_is_refused(make_settings: SettingsFactory, tmp_path: Path) -> None:
    _legacy_table(tmp_path / "lancedb")
    with pytest.raises(EmbeddingModelMismatch, match="unrecorded"):
        async with MemoryService.open(make_settings(), embedder=HashEmbedder(384)):
            pass


async def test_a_new_table_records_the_model_and_uses_nullable_columns(make_settings: SettingsFactory,
                                                                       tmp_path: Path) -> None:
    async with MemoryService.open(make_settings()):
        pass
    schema = lancedb.connect(str(tmp_path / "lancedb")).open_table("memories").schema
    assert schema.metadata == build_schema(HashEmbedder(DIM)).metadata
    assert all(field.nullable for field in schema)
    assert schema.field("vector").type == pa.list_(pa.float32(), DIM)
    assert schema.field("timestamp").type == pa.int64()


async def test_a_column_another_process_adds_is_in_our_next_appends_schema(make_settings: SettingsFactory,
                                                                           tmp_path: Path) -> None:
    # Appends reuse the schema their previous append left; a foreign commit must end that reuse.
    async with MemoryService.open(make_settings()) as service:
        await service.remember("a memory written before the new column")
        await service.writer.flush()  # our append, which leaves its schema for the next one
        store = service.store
        assert "source_app" not in store._schema_at(store.version()).names
        other = lancedb.connect(str(tmp_path / "lancedb"), read_consistency_interval=timedelta(0))
        other.open_table("memories").add_columns(pa.field("source_app", pa.string()))
        assert "source_app" in store._schema_at(store.version()).names
        second = await service.remember("a memory written after the new column")
        await service.writer.flush()
    rows = {r["id"]: r for r in _snapshot(tmp_path / "lancedb")[1]}
    assert len(rows) == 2 and rows[second.memory_id]["source_app"] is None
