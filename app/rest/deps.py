"""FastAPI dependency aliases: routes receive services, never build them."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from app.container import Services
from app.kanban.service import KanbanService
from app.memory.service import MemoryService


def get_services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


def get_memory_service(request: Request) -> MemoryService:
    return get_services(request).memory


def get_kanban_service(request: Request) -> KanbanService:
    return get_services(request).kanban


MemoryServiceDep = Annotated[MemoryService, Depends(get_memory_service)]
KanbanServiceDep = Annotated[KanbanService, Depends(get_kanban_service)]
