"""PLACEHOLDER: replaced by the kanban service implementation."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from app.settings import Settings


class KanbanService:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @classmethod
    @asynccontextmanager
    async def open(cls, settings: Settings) -> AsyncIterator[KanbanService]:
        yield cls(settings)

    def health(self) -> dict[str, Any]:
        return {"ready": True}
