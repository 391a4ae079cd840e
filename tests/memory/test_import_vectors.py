"""An import keeps the exported vectors of the target's model, and never embeds with another one unasked
(real LanceDB tables in tmp_path; memory-lancedb-pro's embedding endpoint faked on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.memory.embeddings import create_embedder
from app.memory.embeddings.hashing import HashEmbedder
from app.memory.import_vectors import ModelChoiceNeeded
from app.memory.store import diagnostics
from app.memory.store.schema import recorded_identity
from app.settings import Settings
from tests.conftest import SettingsFactory
from tests.memory.embeddings.fake_server import FakeEmbeddingServer, fake_embedding_server
from tests.memory.test_transfer import bulk_store, export_text, legacy_table, rows_of, run_import, table_of
from tests.support.openclaw import write_plugin_config

DIM = 256  # legacy_table's vector size


@pytest.fixture
def fake() -> Iterator[FakeEmbeddingServer]:
    with fake_embedding_server(dimension=DIM) as server:
        yield server


def write_openclaw(path: Path, db_path: Path, fake: FakeEmbeddingServer) -> None:
    write_plugin_config(path, db_path, {"apiKey": "sk-test-import", "model": "bge-m3", "baseURL": fake.url,
                                        "dimensions": DIM})


def served_as(tmp_path: Path, db_path: Path, **extra: Any) -> Settings:
    """The settings ``serve`` would have on ``db_path``: no MEMORY_MCP_EMBEDDING_PROVIDER, openclaw.json read."""
    return Settings(db_path=db_path, kanban_db=tmp_path / "kanban.sqlite3", model_cache_dir=tmp_path / "models",
                    openclaw_config=tmp_path / "openclaw.json", log_format="text", **extra)


async def test_a_plugin_tables_export_moves_with_its_vectors_to_where_openclaw_json_points(
        make_settings: SettingsFactory, tmp_path: Path, fake: FakeEmbeddingServer) -> None:
    make_settings()  # a clean environment
    source, target = tmp_path / "plugin", tmp_path / "moved"
    legacy = legacy_table(source, 12)
    write_openclaw(tmp_path / "openclaw.json", source, fake)
    text = await asyncio.to_thread(export_text, served_as(tmp_path, source), vectors=True)
    header = json.loads(text.splitlines()[0])
    assert header["embedding"] == {"provider": "openai", "model": "bge-m3", "dimension": "256",
                                   "from": "openclaw.json"}

    # Where openclaw.json does not point, memory-mcp would embed with its own model: it asks first.
    elsewhere = served_as(tmp_path, target, embedding_provider="hash", embedding_dimensions=DIM)
    with pytest.raises(ModelChoiceNeeded) as refused:
        await run_import(text, elsewhere, HashEmbedder(DIM))
    message = refused.value.message
    assert "openai/bge-m3 (256-d), named by openclaw.json" in message and "hash/hash-bow-v1 (256-d)" in message
    assert "--keep-vectors" in message and "--reembed" in message and not target.exists()

    write_openclaw(tmp_path / "openclaw.json", target, fake)  # the plugin moves to the new directory
    settings = served_as(tmp_path, target)
    embedder = create_embedder(settings)
    try:
        report = await run_import(text, settings, embedder)  # type: ignore[arg-type]
    finally:
        await embedder.close()

    assert (report.written, report.vectors_reused, report.reembedded) == (12, 12, 0)
    assert fake.state.requests == []  # nothing was embedded
    copied = {row["id"]: row for row in rows_of(settings)}
    for row in legacy:
        np.testing.assert_array_equal(np.asarray(copied[row["id"]]["vector"], dtype=np.float32),
                                      np.asarray(row["vector"], dtype=np.float32))
    assert recorded_identity(table_of(settings).schema) == {"provider": "openai", "model": "bge-m3",
                                                            "dimension": "256"}
    plugin = diagnostics.check_plugin(settings, table_of(settings).schema)
    assert plugin.status == "ok" and plugin.detail.startswith("readable by memory-lancedb-pro")


def _header(text: str, **changes: Any) -> str:
    lines = text.splitlines()
    return "\n".join([json.dumps({**json.loads(lines[0]), **changes}), *lines[1:]])


async def test_keep_vectors_keeps_another_models_vectors_of_the_targets_size_and_nothing_else(
        make_settings: SettingsFactory, tmp_path: Path) -> None:
    source = make_settings()
    await asyncio.to_thread(bulk_store, source, 20)
    other = _header(await asyncio.to_thread(export_text, source, vectors=True),
                    embedding={"provider": "openai", "model": "text-embedding-3-small", "dimension": "256"})
    target = make_settings(db_path=tmp_path / "copy")
    with pytest.raises(ModelChoiceNeeded):
        await run_import(other, target, HashEmbedder())
    kept = await run_import(other, target, HashEmbedder(), vectors="keep")
    assert (kept.vectors_reused, kept.reembedded) == (20, 0)
    assert rows_of(target) == rows_of(source)

    small = make_settings(db_path=tmp_path / "small", embedding_dimensions=64)
    with pytest.raises(ModelChoiceNeeded, match="256-d, but the target embeds with hash/hash-bow-v1 \\(64-d\\)"):
        await run_import(other, small, HashEmbedder(64), vectors="keep")
    without = await asyncio.to_thread(export_text, source)
    with pytest.raises(ModelChoiceNeeded, match="no vectors to keep"):
        await run_import(without, target, HashEmbedder(), vectors="keep")
    assert not (tmp_path / "small").exists()


async def test_vectors_recording_no_model_are_kept_at_the_targets_size_as_serve_assumes_and_asked_for_at_another(
        make_settings: SettingsFactory, tmp_path: Path) -> None:
    source = make_settings()
    legacy_table(source.db_path, 6)
    text = await asyncio.to_thread(export_text, source, vectors=True)
    assert json.loads(text.splitlines()[0])["embedding"] is None  # no openclaw.json names it

    same = await run_import(text, make_settings(db_path=tmp_path / "same"), HashEmbedder())
    assert (same.vectors_reused, same.reembedded) == (6, 0)
    small = make_settings(db_path=tmp_path / "small", embedding_dimensions=64)
    with pytest.raises(ModelChoiceNeeded, match="a model the export does not record \\(256-d\\)"):
        await run_import(text, small, HashEmbedder(64))
    again = await run_import(text, small, HashEmbedder(64), vectors="reembed")
    assert (again.vectors_reused, again.reembedded) == (0, 6)
