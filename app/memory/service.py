"""PLACEHOLDER: replaced by the memory service implementation."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from app.settings import Settings


class MemoryService:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @classmethod
    @asynccontextmanager
    async def open(cls, settings: Settings) -> AsyncIterator[MemoryService]:
        yield cls(settings)

    def health(self) -> dict[str, Any]:
        return {"ready": True}
