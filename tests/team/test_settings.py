"""Team-mode settings: the db path as a URI or a directory, storage options, the board's default, stateless HTTP."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from app.settings import Settings
from tests.conftest import SettingsFactory


@pytest.mark.parametrize("uri", ["s3://team-bucket/memory", "gs://team-bucket/memory", "az://container/memory",
                                 "s3+ddb://team-bucket/memory?ddbTableName=commits"])
def test_an_object_store_uri_is_kept_as_it_is(make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch,
                                             uri: str) -> None:
    make_settings()
    monkeypatch.setenv("MEMORY_MCP_DB_PATH", uri + "/")
    settings = Settings()
    assert settings.db_path == uri and settings.db_uri == uri  # not s3:/team-bucket (a Path would make that)
    assert settings.on_object_store and settings.db_dir is None


def test_a_plain_path_is_a_directory_with_the_home_expanded(make_settings: SettingsFactory,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    make_settings()
    monkeypatch.setenv("MEMORY_MCP_DB_PATH", "~/memories/lancedb")
    settings = Settings()
    assert settings.db_path == Path.home() / "memories" / "lancedb" == settings.db_dir
    assert not settings.on_object_store
    assert settings.kanban_db_path == Path.home() / "memories" / "memory-mcp-kanban.sqlite3"
    assert Settings(db_path="file:///srv/memory").db_dir == Path("/srv/memory")


@pytest.mark.parametrize("bad", ["http://example.invalid/x", "s3://", "ftp://host/db"])
def test_other_uris_are_refused_with_the_variable_named(make_settings: SettingsFactory, bad: str) -> None:
    with pytest.raises(ValidationError, match="MEMORY_MCP_DB_PATH"):
        make_settings(db_path=bad)


def test_the_board_stays_a_local_file_when_the_table_is_in_a_bucket(make_settings: SettingsFactory) -> None:
    settings = make_settings(db_path="s3://team-bucket/memory", kanban_db=None)
    assert settings.kanban_db_path == Path("~/.openclaw/memory/memory-mcp-kanban.sqlite3").expanduser()
    chosen = make_settings(db_path="s3://team-bucket/memory")
    assert chosen.kanban_db_path == chosen.kanban_db  # an explicit MEMORY_MCP_KANBAN_DB wins


def test_storage_options_are_json_with_string_values_and_stay_out_of_repr(
        make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    make_settings()
    options = '{"aws_endpoint": "http://127.0.0.1:9000", "allow_http": true, "aws_secret_access_key": "s3cr3t"}'
    monkeypatch.setenv("MEMORY_MCP_STORAGE_OPTIONS", options)
    monkeypatch.setenv("MEMORY_MCP_STATELESS_HTTP", "true")
    settings = Settings()
    assert settings.storage_options == {"aws_endpoint": "http://127.0.0.1:9000", "allow_http": "true",
                                        "aws_secret_access_key": "s3cr3t"}
    assert "s3cr3t" not in repr(settings)
    assert settings.stateless_http is True
    assert Settings(storage_options="").storage_options == {}
    monkeypatch.delenv("MEMORY_MCP_STATELESS_HTTP")
    assert Settings().stateless_http is False  # sessions by default
