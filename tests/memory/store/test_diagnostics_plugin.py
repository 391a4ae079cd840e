"""``doctor`` says a table is readable by memory-lancedb-pro only when the plugin, as openclaw.json sets it up,
would open it; a plugin table whose model openclaw.json names draws no 'records no model' warning."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from app.memory.embeddings import create_embedder
from app.memory.store import diagnostics
from app.memory.store.table import Store
from app.settings import Settings
from tests.conftest import SettingsFactory
from tests.memory.test_transfer import legacy_table
from tests.support.openclaw import write_plugin_config

DIM = 256  # legacy_table's vector size


def openclaw(tmp_path: Path, db_path: Path, dimensions: int) -> Path:
    embedding = {"apiKey": "sk-doctor", "model": "bge-m3", "baseURL": "http://127.0.0.1:9/v1", "dimensions": dimensions}
    return write_plugin_config(tmp_path / "openclaw.json", db_path, embedding, enabled=None)


def served_as(tmp_path: Path, config: Path | None, **extra: object) -> Settings:
    return Settings(db_path=tmp_path / "lancedb", kanban_db=tmp_path / "kanban.sqlite3",
                    model_cache_dir=tmp_path / "models", openclaw_config=config, log_format="text", **extra)


def checks(settings: Settings) -> dict[str, diagnostics.Check]:
    embedder = create_embedder(settings)
    return {check.name: check for check in diagnostics.check_table(settings, embedder)}


def test_a_plugin_table_of_the_plugins_size_is_readable_by_it_with_no_model_warning(
        make_settings: SettingsFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    make_settings()
    legacy_table(tmp_path / "lancedb", 3, "2.0")
    settings = served_as(tmp_path, openclaw(tmp_path, tmp_path / "lancedb", DIM))
    found = checks(settings)
    assert found["openclaw_plugin"].status == "ok"
    assert found["openclaw_plugin"].detail == (
        "readable by memory-lancedb-pro: Lance format 2.0, 256-d vectors as openclaw.json configures 256-d "
        "vectors (model bge-m3)")
    assert found["embedding_model"].status == "ok" and "openclaw.json names it" in found["embedding_model"].detail
    with caplog.at_level(logging.WARNING):
        Store.open(settings, create_embedder(settings))
    assert "records no embedding model" not in caplog.text


def test_a_table_of_another_size_than_the_plugins_is_refused_by_it_and_doctor_says_so(
        make_settings: SettingsFactory, tmp_path: Path) -> None:
    make_settings()
    legacy_table(tmp_path / "lancedb", 3, "2.0")
    config = openclaw(tmp_path, tmp_path / "lancedb", 384)
    found = checks(served_as(tmp_path, config, embedding_provider="hash", embedding_dimensions=DIM))
    plugin = found["openclaw_plugin"]
    assert plugin.status == "fail"
    assert plugin.detail == ("memory-lancedb-pro refuses this table: it holds 256-d vectors, openclaw.json "
                             "configures 384-d vectors (model bge-m3)")
    assert str(config) in (plugin.fix or "")
    assert "readable by" not in found["file_format"].detail


def test_without_the_plugin_on_the_directory_doctor_claims_nothing_for_it(
        make_settings: SettingsFactory, tmp_path: Path) -> None:
    make_settings()
    legacy_table(tmp_path / "lancedb", 2, "2.0")
    elsewhere = openclaw(tmp_path, tmp_path / "other", DIM)
    for config in (None, elsewhere):
        plugin = checks(served_as(tmp_path, config, embedding_provider="hash", embedding_dimensions=DIM))
        assert plugin["openclaw_plugin"].status == "ok"
        assert "sets up no memory-lancedb-pro on" in plugin["openclaw_plugin"].detail
        assert "readable by" not in plugin["openclaw_plugin"].detail
    settings = served_as(tmp_path, openclaw(tmp_path, tmp_path / "lancedb", DIM), embedding_provider="hash",
                         embedding_dimensions=DIM, table="notes")
    Store.open(settings, create_embedder(settings))  # a table of memory-mcp's beside the plugin's
    other_table = checks(settings)["openclaw_plugin"]
    assert other_table.status == "ok" and "opens the table 'memories'" in other_table.detail


def test_a_table_in_a_lance_format_the_plugin_cannot_read_is_not_readable_by_it(
        make_settings: SettingsFactory, tmp_path: Path) -> None:
    make_settings()
    legacy_table(tmp_path / "lancedb", 2)  # LanceDB 0.40's default format, 2.2
    config = openclaw(tmp_path, tmp_path / "lancedb", DIM)
    plugin = checks(served_as(tmp_path, config, embedding_provider="hash", embedding_dimensions=DIM))["openclaw_plugin"]
    assert (plugin.status, plugin.detail) == ("fail", "memory-lancedb-pro cannot read Lance format 2.2")
    assert plugin.fix == "`memory-mcp rewrite-table`"
