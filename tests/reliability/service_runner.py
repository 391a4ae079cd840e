"""A MemoryService kept open across hypothesis examples: one event loop, entered and left explicitly."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, TypeVar

from app.memory.service import MemoryService
from app.settings import Settings

T = TypeVar("T")


class ServiceRunner:
    """Hypothesis calls plain functions; this runs each service call on one long-lived loop."""

    def __init__(self, directory: Path) -> None:
        self.settings = Settings(db_path=directory / "lancedb", kanban_db=directory / "kanban.sqlite3",
                                 embedding_provider="hash", log_format="text")
        self._runner = asyncio.Runner()
        self._context: AbstractAsyncContextManager[MemoryService] = MemoryService.open(self.settings)
        self.service = self._runner.run(self._context.__aenter__())

    def run(self, call: Coroutine[Any, Any, T]) -> T:
        return self._runner.run(call)

    def close(self) -> None:
        try:
            self._runner.run(self._context.__aexit__(None, None, None))
        finally:
            self._runner.close()

    def snapshot(self) -> list[tuple[str, str, str, str, float]]:
        """Every row's visible fields in the table, sorted, once every acknowledged write is flushed into it:
        compared before and after a rejected call."""
        self.run(self.service.writer.flush())
        table = self.service.store.scan(None, ["id", "text", "scope", "category", "importance"]).to_pylist()
        return sorted((r["id"], r["text"], r["scope"], r["category"], r["importance"]) for r in table)
