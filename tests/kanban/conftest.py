"""Kanban fixtures: every board test runs on a SQLite file in tmp_path and on a real PostgreSQL database
(``kanban_db``, tests/support/postgres.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from app.kanban.backend import BoardDatabase, open_database
from app.kanban.job_audit import FileAudit, TableAudit, audit_path
from app.kanban.service import KanbanService
from app.settings import Settings
from tests.conftest import SettingsFactory


@pytest.fixture
def settings(make_settings: SettingsFactory, kanban_db: Path | str) -> Settings:
    return make_settings(kanban_db=kanban_db)


@pytest.fixture
async def kanban(settings: Settings) -> AsyncIterator[KanbanService]:
    async with KanbanService.open(settings) as service:
        yield service


def migrated(settings: Settings) -> BoardDatabase:
    """Another connection to the board, as another process would hold; the caller closes it."""
    db = open_database(settings)
    db.migrate()
    return db


def audit_entries(settings: Settings) -> list[dict[str, Any]]:
    """The job audit trail as stored: the JSONL file next to a SQLite board, the table in PostgreSQL."""
    if settings.kanban_db_url is None:
        return FileAudit(audit_path(settings.kanban_db_path)).entries()
    db = migrated(settings)
    try:
        return TableAudit(db).entries()
    finally:
        db.close()
