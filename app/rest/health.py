"""Liveness and readiness probes."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from app.container import Services

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """Liveness: the process answers. Open to unauthenticated callers (no data in it)."""
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(request: Request) -> JSONResponse:
    """Readiness: the embedder is loaded and both stores are open."""
    services: Services = request.app.state.services
    body: dict[str, Any] = {"status": "ok"}
    ready = True
    try:
        body["memory"] = services.memory.health()
        ready = ready and bool(body["memory"].get("ready", True))
    except Exception as exc:  # noqa: BLE001 - readiness reports, never raises
        body["memory"] = {"ready": False, "error": str(exc)}
        ready = False
    try:
        body["kanban"] = services.kanban.health()
    except Exception as exc:  # noqa: BLE001
        body["kanban"] = {"ready": False, "error": str(exc)}
        ready = False
    body["status"] = "ok" if ready else "starting"
    return JSONResponse(body, status_code=200 if ready else 503)
