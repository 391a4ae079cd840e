"""Choosing the board's database, and a PostgreSQL board that stops answering."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import psycopg
import pytest
from pydantic import ValidationError

from app.errors import Unavailable
from app.kanban import db as sqlite_db
from app.kanban import postgres
from app.kanban.errors import BoardUnavailable
from app.kanban.service import KanbanService
from tests.conftest import SettingsFactory
from tests.support import postgres as pg_support
from tests.support.postgres import PostgresServer
from tests.support.server import free_port


@pytest.mark.parametrize("scheme", ["postgresql", "postgres", "PostgreSQL"])
def test_a_postgres_url_puts_the_board_in_postgres(make_settings: SettingsFactory, scheme: str) -> None:
    settings = make_settings(kanban_db=f"{scheme}://agent:s3cret@db.internal:5432/board")
    url = f"{scheme.lower()}://agent:s3cret@db.internal:5432/board"
    assert settings.kanban_db_url == url
    assert "s3cret" not in repr(settings)
    assert postgres.redacted(url) == f"{scheme.lower()}://agent:***@db.internal:5432/board"


def test_a_path_stays_a_sqlite_board_and_other_urls_are_refused(make_settings: SettingsFactory) -> None:
    settings = make_settings(kanban_db="~/boards/team.sqlite3")
    assert settings.kanban_db_url is None and settings.kanban_db_path == Path("~/boards/team.sqlite3").expanduser()
    with pytest.raises(ValidationError, match="MEMORY_MCP_KANBAN_DB must be a SQLite file path or a postgresql://"):
        make_settings(kanban_db="mysql://db/board")


async def test_a_board_database_that_does_not_answer_is_unavailable_at_start(
    make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(postgres, "POOL_TIMEOUT_S", 0.5)
    url = f"postgresql://postgres:pw@127.0.0.1:{free_port()}/board"
    with pytest.raises(BoardUnavailable, match=r"127\.0\.0\.1:\d+/board does not answer") as caught:
        async with KanbanService.open(make_settings(kanban_db=url)):
            pass
    assert "pw" not in str(caught.value) and caught.value.code == "board_unavailable"


async def test_a_board_database_that_goes_away_is_a_503_error_not_a_crash(
    make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch, postgres_server: PostgresServer
) -> None:
    monkeypatch.setattr(postgres, "POOL_TIMEOUT_S", 0.5)
    with psycopg.connect(postgres_server.url(), autocommit=True) as admin:
        admin.execute('CREATE DATABASE "going_away"')
    async with KanbanService.open(make_settings(kanban_db=postgres_server.url("going_away"))) as kanban:
        await kanban.create_task("before", "a")
        with psycopg.connect(postgres_server.url(), autocommit=True) as admin:
            admin.execute('DROP DATABASE "going_away" WITH (FORCE)')
        for _ in range(2):  # the terminated connection, then no connection at all
            with pytest.raises(BoardUnavailable, match="is unavailable") as caught:
                await kanban.list_tasks()
            assert isinstance(caught.value, Unavailable) and caught.value.retry_after_s == 1  # REST: 503 + Retry-After


def test_without_server_binaries_the_postgres_fixture_names_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pg_support, "SEARCH_PATH", "/nonexistent")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(pg_support.PostgresUnavailable, match="need 'initdb' .*install the postgresql package"), \
            pg_support.temporary_postgres():
        pass


async def test_a_version_1_sqlite_board_is_migrated_and_its_running_jobs_are_abandoned(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    path = tmp_path / "old.sqlite3"
    with sqlite3.connect(path) as old:  # the board as the first schema left it
        for statement in sqlite_db.MIGRATIONS[0]:
            old.execute(statement)
        old.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        old.execute("INSERT INTO schema_version (version) VALUES (1)")
        old.execute("INSERT INTO jobs (id, argv, status, started_ms) VALUES ('job-old', '[\"x\"]', 'running', 1)")
    old.close()
    async with KanbanService.open(make_settings(kanban_db=path)) as kanban:
        assert kanban.health()["jobs_abandoned_at_start"] == 1  # recorded before servers were: its server is gone
        assert (await kanban.get_job("job-old")).status == "abandoned"
    with sqlite3.connect(path) as reopened:
        assert reopened.execute("SELECT version FROM schema_version").fetchone()[0] == sqlite_db.SCHEMA_VERSION == 2
    reopened.close()


async def test_while_postgresql_is_down_board_calls_fail_fast_and_the_board_comes_back_by_itself(
    make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(postgres, "POOL_TIMEOUT_S", 30.0)  # a call that waited for the pool would show
    with pg_support.temporary_postgres() as server:
        async with KanbanService.open(make_settings(kanban_db=server.url())) as kanban:
            await kanban.create_task("before the outage", "a")
            pg_support.stop(server)
            waits = []
            for call in (kanban.list_tasks, kanban.get_board, kanban.list_tasks, kanban.change_marker):
                started = time.monotonic()
                with pytest.raises(BoardUnavailable) as caught:
                    await call()
                waits.append(time.monotonic() - started)
                assert caught.value.code == "board_unavailable" and caught.value.retry_after_s == 1
            pg_support.start_again(server)
            deadline = time.monotonic() + 30
            while True:  # the background reconnect, not this loop, brings the board back
                try:
                    tasks = await kanban.list_tasks()
                    break
                except BoardUnavailable:
                    assert time.monotonic() < deadline, "the board never came back"
                    await asyncio.sleep(0.1)  # polling the board's state, bounded by the deadline
    assert max(waits) < 2.0, waits  # the pool alone would have waited 30 s; docs/operations.md has the figures
    assert [task.title for task in tasks] == ["before the outage"]
