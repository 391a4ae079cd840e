"""PLACEHOLDER: replaced by the MCP front end (legacy SSE + Streamable HTTP)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from app.container import Services
from app.settings import Settings


class McpFrontEnd:
    def __init__(self, services: Services, settings: Settings) -> None:
        self.services = services
        self.settings = settings

    def install(self, app: FastAPI) -> None:
        """Add the MCP routes to the app."""

    @asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        yield
