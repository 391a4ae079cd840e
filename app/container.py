"""The services one process runs, filled in by the lifespan and read by the adapters."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from app.errors import Unavailable

if TYPE_CHECKING:  # the services are imported as the server opens them, after it answers /healthz
    from app.kanban.service import KanbanService
    from app.memory.service import MemoryService


@dataclass
class Services:
    """Adapters hold this object from the start; the lifespan sets its members once they are open."""

    _memory: MemoryService | None = field(default=None, repr=False)
    _kanban: KanbanService | None = field(default=None, repr=False)

    @property
    def memory(self) -> MemoryService:
        if self._memory is None:
            raise Unavailable("the memory service is starting or stopping; retry shortly", code="starting")
        return self._memory

    @memory.setter
    def memory(self, value: MemoryService | None) -> None:
        self._memory = value

    @property
    def kanban(self) -> KanbanService:
        if self._kanban is None:
            raise Unavailable("the kanban service is starting or stopping; retry shortly", code="starting")
        return self._kanban

    @kanban.setter
    def kanban(self, value: KanbanService | None) -> None:
        self._kanban = value
