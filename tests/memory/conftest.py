"""Fixtures for the memory service's tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from app.memory.service import MemoryService
from tests.conftest import SettingsFactory


@pytest.fixture
async def service(make_settings: SettingsFactory) -> AsyncIterator[MemoryService]:
    """A service on a fresh table in a temp dir (hash embedder), closed after the test."""
    async with MemoryService.open(make_settings()) as opened:
        yield opened
