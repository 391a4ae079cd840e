"""FastAPI dependency aliases: routes receive services, never build them.

The providers are ``async def`` on purpose: FastAPI runs a plain ``def`` dependency in its thread
pool, one hop per request; under 64 concurrent writers that hop (thread hand-off, anyio's capacity
limiter) held the GIL for a fifth of the event loop's time.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request

from app.container import Services
from app.edge.auth import require
from app.kanban.service import KanbanService
from app.memory.service import MemoryService
from app.settings import Permission


def _services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


async def get_memory_service(request: Request) -> MemoryService:
    return _services(request).memory


async def get_kanban_service(request: Request) -> KanbanService:
    return _services(request).kanban


MemoryServiceDep = Annotated[MemoryService, Depends(get_memory_service)]
KanbanServiceDep = Annotated[KanbanService, Depends(get_kanban_service)]


def _permission(needed: Permission) -> Any:
    """A route dependency that refuses (403 ``forbidden``) a token without ``needed`` before the body is validated."""

    async def check(request: Request) -> None:
        # The edge guard sets the caller's permissions on every request; without them nothing is granted.
        state = request.state
        require(getattr(state, "permissions", frozenset()), needed, getattr(state, "agent", None))

    return Depends(check)


MayWriteMemory = _permission("memory:write")
MayWriteBoard = _permission("board:write")
MayTriggerJobs = _permission("jobs:trigger")
