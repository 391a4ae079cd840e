"""Export/import as JSONL and re-embedding into a new table, on real LanceDB tables in tmp_path."""

from __future__ import annotations

import asyncio
import io
import json
import os
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import pyarrow as pa
import pytest

from app.memory.embeddings.hashing import HashEmbedder
from app.memory.errors import EmbeddingModelMismatch, StoreBusy
from app.memory.export import export_jsonl
from app.memory.import_vectors import ModelChoiceNeeded
from app.memory.reembed import compact_table, reembed
from app.memory.rows import new_row
from app.memory.service import MemoryService
from app.memory.store import diagnostics
from app.memory.store.locks import LOCK_DIR_NAME, STALE_S, WriteLock
from app.memory.store.schema import recorded_identity, vector_dimension
from app.memory.store.table import Store
from app.memory.transfer import InvalidExport, SameTable, TransferReport, import_jsonl
from app.settings import Settings
from tests.conftest import SettingsFactory

SCOPES = ("global", "agent:claude-code", "project:memory-mcp")


def bulk_store(settings: Settings, count: int, embedder: HashEmbedder | None = None) -> list[str]:
    """``count`` realistic rows over three scopes, written in one commit through the store."""
    embedder = embedder or HashEmbedder()
    texts = [f"memory {i} about topic {i % 17} 記憶 {i % 5}" for i in range(count)]
    vectors = asyncio.run(embedder.embed_documents(texts)) if count else []
    store = Store.open(settings, embedder)
    rows = [new_row(text, vector, SCOPES[i % 3], ["t", f"k{i % 4}"], 0.5 + (i % 5) / 10, None, embedder.model)
            for i, (text, vector) in enumerate(zip(texts, vectors, strict=True))]
    if rows:
        store.add(rows)
    return [row["id"] for row in rows]


def table_of(settings: Settings) -> Any:
    db = lancedb.connect(str(settings.db_path), read_consistency_interval=timedelta(0))
    return db.open_table(settings.table)


def rows_of(settings: Settings) -> list[dict[str, Any]]:
    return sorted(table_of(settings).to_arrow().to_pylist(), key=lambda row: row["id"])


def export_text(settings: Settings, **options: Any) -> str:
    out = io.StringIO()
    export_jsonl(settings, out, **options)
    return out.getvalue()


async def run_import(text: str, settings: Settings, embedder: HashEmbedder, **options: Any) -> TransferReport:
    return await import_jsonl(io.StringIO(text), settings, embedder, **options)


async def test_export_then_import_round_trips_2500_rows_in_three_scopes_bit_exactly(
        make_settings: SettingsFactory, tmp_path: Path) -> None:
    source = make_settings()
    ids = await asyncio.to_thread(bulk_store, source, 2500)
    text = await asyncio.to_thread(export_text, source, vectors=True, batch_size=700)
    lines = text.splitlines()
    header = json.loads(lines[0])
    assert len(lines) == 2501 and header["rows"] == 2500 and header["embedding"]["dimension"] == "256"
    assert {json.loads(line)["scope"] for line in lines[1:]} == set(SCOPES)

    target = make_settings(db_path=tmp_path / "copy")
    report = await run_import(text, target, HashEmbedder())

    assert report.written == 2500 and report.vectors_reused == 2500 and report.reembedded == 0
    assert rows_of(target) == rows_of(source)  # every column, vectors bit-exact
    assert sorted(ids) == [row["id"] for row in rows_of(target)]


async def test_reimporting_an_export_changes_nothing_not_even_the_table_version(
        make_settings: SettingsFactory, tmp_path: Path) -> None:
    source = make_settings()
    await asyncio.to_thread(bulk_store, source, 300)
    text = await asyncio.to_thread(export_text, source, vectors=True)
    target = make_settings(db_path=tmp_path / "copy")
    await run_import(text, target, HashEmbedder(), batch_size=100)
    before = (rows_of(target), table_of(target).version, table_of(target).count_rows())

    again = await run_import(text, target, HashEmbedder(), batch_size=100)
    into_source = await run_import(text, source, HashEmbedder())

    assert (rows_of(target), table_of(target).version, table_of(target).count_rows()) == before
    assert again.written == 0 and again.skipped_existing == 300 and again.reembedded == 0
    assert into_source.written == 0 and table_of(source).count_rows() == 300


async def test_export_without_vectors_and_with_a_scope_writes_only_that_scope(make_settings: SettingsFactory) -> None:
    settings = make_settings()
    await asyncio.to_thread(bulk_store, settings, 30)
    lines = (await asyncio.to_thread(export_text, settings, scope="agent:claude-code")).splitlines()
    rows = [json.loads(line) for line in lines[1:]]
    assert json.loads(lines[0])["rows"] == 10 and len(rows) == 10
    assert all(row["scope"] == "agent:claude-code" and "vector" not in row for row in rows)
    assert set(rows[0]) == {"id", "text", "scope", "category", "importance", "timestamp", "metadata"}


def legacy_table(db_path: Path, count: int, storage_version: str | None = None) -> list[dict[str, Any]]:
    """memory-lancedb-pro's shape: full UUIDs, float ms timestamps, no recorded model, extra columns;
    ``storage_version``: the Lance format ("2.0" is the plugin's), else LanceDB's default."""
    schema = pa.schema([
        pa.field("id", pa.string()), pa.field("text", pa.string()), pa.field("vector", pa.list_(pa.float32(), 256)),
        pa.field("category", pa.string()), pa.field("scope", pa.string()), pa.field("importance", pa.float64()),
        pa.field("timestamp", pa.float64()), pa.field("metadata", pa.string()), pa.field("source_app", pa.string()),
        pa.field("access_count", pa.int32()),
    ])
    rng = np.random.default_rng(3)
    rows = []
    for i in range(count):
        vector = rng.standard_normal(256).astype(np.float32)
        unit = (vector / np.linalg.norm(vector)).tolist()
        rows.append({"id": str(uuid.uuid4()), "text": f"legacy {i}", "vector": unit,
                     "category": "fact", "scope": SCOPES[i % 3], "importance": 0.25, "timestamp": 1.7e12 + i + 0.5,
                     "metadata": json.dumps({"l0": f"abstract {i}", "embedding_model": "jina-v3"}),
                     "source_app": "openclaw", "access_count": i})
    options = {"new_table_data_storage_version": storage_version} if storage_version else None
    lancedb.connect(str(db_path)).create_table("memories", pa.Table.from_pylist(rows, schema=schema),
                                               storage_options=options)
    return rows


async def test_a_memory_lancedb_pro_table_exports_and_imports_with_its_extra_columns(
        make_settings: SettingsFactory, tmp_path: Path) -> None:
    source = make_settings()
    legacy = legacy_table(source.db_path, 12)
    before = (rows_of(source), table_of(source).version)
    text = await asyncio.to_thread(export_text, source)
    exported = [json.loads(line) for line in text.splitlines()[1:]]
    assert exported[0]["source_app"] == "openclaw" and exported[5]["access_count"] == 5
    assert exported[3]["timestamp"] == 1.7e12 + 3.5

    target = make_settings(db_path=tmp_path / "copy")
    report = await run_import(text, target, HashEmbedder())

    assert (rows_of(source), table_of(source).version) == before  # export only reads
    schema = table_of(target).schema
    assert schema.field("access_count").type == pa.int32() and schema.field("timestamp").type == pa.float64()
    assert recorded_identity(schema) == HashEmbedder().identity  # vectors are now the hash model's
    assert report.reembedded == 12 and report.vectors_reused == 0  # the source model was never recorded
    copied = {row["id"]: row for row in rows_of(target)}
    for row in legacy:
        got = copied[row["id"]]
        assert {k: got[k] for k in ("text", "scope", "timestamp", "source_app", "access_count")} == {
            k: row[k] for k in ("text", "scope", "timestamp", "source_app", "access_count")}
        assert json.loads(got["metadata"]) == {**json.loads(row["metadata"]), "embedding_model": "hash-bow-v1"}


async def test_import_with_an_embedder_of_another_dimension_asks_first_then_reembeds_every_text(
        make_settings: SettingsFactory, tmp_path: Path) -> None:
    source = make_settings()
    await asyncio.to_thread(bulk_store, source, 120)
    text = await asyncio.to_thread(export_text, source, vectors=True)
    small = HashEmbedder(64)
    target = make_settings(db_path=tmp_path / "small", embedding_dimensions=64)
    with pytest.raises(ModelChoiceNeeded) as refused:
        await run_import(text, target, small)
    assert "hash/hash-bow-v1 (256-d)" in refused.value.message and "(64-d)" in refused.value.message
    assert not (tmp_path / "small").exists()  # refused before the target was created

    report = await run_import(text, target, small, batch_size=50, vectors="reembed")

    assert report.reembedded == 120 and report.vectors_reused == 0 and report.written == 120
    assert vector_dimension(table_of(target).schema) == 64
    row = rows_of(target)[0]
    expected = (await small.embed_documents([row["text"]]))[0]
    np.testing.assert_allclose(np.asarray(row["vector"]), expected, rtol=1e-6)


async def test_import_into_a_table_of_another_model_is_refused_before_writing(make_settings: SettingsFactory) -> None:
    settings = make_settings()
    await asyncio.to_thread(bulk_store, settings, 4)
    text = await asyncio.to_thread(export_text, settings, vectors=True)
    version = table_of(settings).version
    with pytest.raises(EmbeddingModelMismatch):
        await run_import(text, make_settings(embedding_dimensions=64), HashEmbedder(64))
    assert table_of(settings).version == version


async def test_import_refuses_a_file_that_is_not_an_export_and_counts_broken_lines(
        make_settings: SettingsFactory, tmp_path: Path) -> None:
    settings = make_settings()
    with pytest.raises(InvalidExport):
        await run_import('{"id": "a", "text": "no header"}\n', settings, HashEmbedder())
    await asyncio.to_thread(bulk_store, settings, 3)
    lines = (await asyncio.to_thread(export_text, settings, vectors=True)).splitlines()
    damaged = [lines[0], lines[1], "{not json", '{"text": "no id"}', lines[1], lines[2], ""]
    target = make_settings(db_path=tmp_path / "copy")
    report = await run_import("\n".join(damaged), target, HashEmbedder())
    assert (report.written, report.invalid) == (2, 3)


async def test_import_waits_for_the_servers_write_lock_and_writes_nothing_when_it_stays_held(
        make_settings: SettingsFactory, tmp_path: Path) -> None:
    source = make_settings()
    await asyncio.to_thread(bulk_store, source, 5)
    text = await asyncio.to_thread(export_text, source, vectors=True)
    target = make_settings(db_path=tmp_path / "copy", lock_timeout_s=0.3)
    await asyncio.to_thread(Store.open, target, HashEmbedder())
    with WriteLock(target.db_path, 5).hold(), pytest.raises(StoreBusy):
        await run_import(text, target, HashEmbedder())
    assert table_of(target).count_rows() == 0


async def test_reembed_into_a_new_dir_with_another_dimension_leaves_both_stores_usable(
        make_settings: SettingsFactory, tmp_path: Path) -> None:
    source = make_settings()
    await asyncio.to_thread(bulk_store, source, 250)
    before = (rows_of(source), table_of(source).version)
    target = make_settings(db_path=tmp_path / "new", embedding_dimensions=64)

    report = await reembed(source, target, HashEmbedder(64), batch_size=100)

    assert report.written == 250 and report.reembedded == 250
    assert (rows_of(source), table_of(source).version) == before
    assert recorded_identity(table_of(target).schema) == HashEmbedder(64).identity
    strip = [{k: v for k, v in row.items() if k != "vector"} for row in rows_of(source)]
    assert [{k: v for k, v in row.items() if k != "vector"} for row in rows_of(target)] == strip
    async with MemoryService.open(target) as service:
        assert (await service.recall("memory 7 about topic 7", top_k=1)).hits[0].text.startswith("memory 7 ")
    async with MemoryService.open(source) as service:
        assert (await service.stats()).total == 250
    with pytest.raises(EmbeddingModelMismatch):
        async with MemoryService.open(make_settings(db_path=target.db_path)):
            pass


async def test_reembed_beside_the_source_builds_a_new_table_and_never_the_source_itself(
        make_settings: SettingsFactory) -> None:
    source = make_settings()
    await asyncio.to_thread(bulk_store, source, 20)
    with pytest.raises(SameTable):
        await reembed(source, make_settings(embedding_dimensions=64), HashEmbedder(64))
    target = make_settings(table="memories_hash_64", embedding_dimensions=64)
    await reembed(source, target, HashEmbedder(64))
    assert table_of(target).count_rows() == 20 and vector_dimension(table_of(source).schema) == 256


class Interrupted(Exception):
    pass


async def test_an_interrupted_reembed_resumes_to_the_exact_row_set_without_duplicates(
        make_settings: SettingsFactory, tmp_path: Path) -> None:
    source = make_settings()
    ids = await asyncio.to_thread(bulk_store, source, 450)
    target = make_settings(db_path=tmp_path / "new", embedding_dimensions=64)

    def stop_after_200(done: int, total: int | None) -> None:
        if done >= 200:
            raise Interrupted

    with pytest.raises(Interrupted):
        await reembed(source, target, HashEmbedder(64), batch_size=100, progress=stop_after_200)
    assert table_of(target).count_rows() == 200

    resumed = await reembed(source, target, HashEmbedder(64), batch_size=100)

    assert (resumed.skipped_existing, resumed.written) == (200, 250)
    target_ids = [row["id"] for row in rows_of(target)]
    assert target_ids == sorted(ids) and len(set(target_ids)) == 450


def test_compacting_merges_the_fragments_of_many_commits(make_settings: SettingsFactory) -> None:
    settings = make_settings()
    for _ in range(4):
        bulk_store(settings, 5)
    assert table_of(settings).stats()["fragment_stats"]["num_fragments"] == 4
    compact_table(settings)
    assert table_of(settings).stats()["fragment_stats"]["num_fragments"] == 1
    assert table_of(settings).count_rows() == 20


# --- doctor checks ----------------------------------------------------------------------------------


def test_doctor_checks_name_a_model_mismatch_with_the_fix(make_settings: SettingsFactory) -> None:
    settings = make_settings()
    bulk_store(settings, 3)
    checks = {c.name: c for c in diagnostics.check_table(settings, HashEmbedder(64))}
    assert checks["embedding_model"].status == "fail" and "256-d" in checks["embedding_model"].detail
    assert "reembed --provider hash --dimensions 64" in (checks["embedding_model"].fix or "")
    assert checks["vector_dimension"].status == "fail"


def test_doctor_checks_tell_a_stale_lock_from_a_live_one(make_settings: SettingsFactory) -> None:
    settings = make_settings()
    bulk_store(settings, 1)
    lock = settings.db_path / LOCK_DIR_NAME
    lock.mkdir()
    assert diagnostics.check_lock(settings.db_path).status == "ok"  # just refreshed: a live holder
    old = time.time() - STALE_S * 3
    os.utime(lock, (old, old))
    stale = diagnostics.check_lock(settings.db_path)
    assert stale.status == "warn" and "doctor --fix" in (stale.fix or "") and "not refreshed" in stale.detail


async def test_doctor_checks_pass_on_a_healthy_store(make_settings: SettingsFactory) -> None:
    settings = make_settings()
    await asyncio.to_thread(bulk_store, settings, 5)
    checks = [diagnostics.check_db_path(settings.db_path), *diagnostics.check_table(settings, HashEmbedder()),
              diagnostics.check_lock(settings.db_path), await diagnostics.check_embedder(HashEmbedder())]
    assert [(c.name, c.status) for c in checks if c.status != "ok"] == []
    assert [c.name for c in checks] == ["db_path", "table", "schema", "embedding_model", "vector_dimension",
                                        "file_format", "openclaw_plugin", "fragments", "rows", "write_lock",
                                        "embedder"]
