"""Kanban fixtures: a service opened on a SQLite file in tmp_path."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from app.kanban.service import KanbanService
from app.settings import Settings


@pytest.fixture
async def kanban(settings: Settings) -> AsyncIterator[KanbanService]:
    async with KanbanService.open(settings) as service:
        yield service
