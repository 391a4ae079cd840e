"""PLACEHOLDER: replaced by the edge guard (Host/Origin/token/body limits)."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from app.settings import Settings


class EdgeGuard:
    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)
