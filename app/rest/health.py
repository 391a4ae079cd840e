"""Liveness and readiness probes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from app.container import Services
from app.startup import Startup

router = APIRouter(tags=["health"])


def process_memory_mb() -> dict[str, int]:
    """This process's resident memory, split: ``anonymous`` (its heap: the kernel cannot drop it) and
    ``mapped_files`` (the saved index's pages, among others: page cache the kernel reclaims under pressure
    and reads back on use). Empty where ``/proc`` is not Linux's."""
    fields = {"RssAnon:": "anonymous", "RssFile:": "mapped_files"}
    try:
        lines = Path("/proc/self/status").read_text().splitlines()
    except OSError:
        return {}
    return {fields[p[0]]: int(p[1]) // 1024 for p in (line.split() for line in lines) if p and p[0] in fields}


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """Liveness: the process answers. Open to unauthenticated callers (no data in it)."""
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(request: Request) -> JSONResponse:
    """Readiness: the gate open, both stores open, the model and the vector cache loaded; ``loading`` names
    what is not yet. A 200 means every front end (REST, MCP, the dashboard) serves the next request.

    The server answers requests before that (they wait at the start-up gate, remember waits for the
    model, recall uses keyword search and searches LanceDB until the loads end); 503 until ready.
    """
    services: Services = request.app.state.services
    startup: Startup = request.app.state.startup
    loading = list(startup.opening)
    body: dict[str, Any] = {"status": "ok", "startup": startup.status()}
    try:
        body["memory"] = services.memory.health()
        loading += body["memory"].get("loading", [])
    except Exception as exc:  # noqa: BLE001 - readiness reports, never raises
        body["memory"] = {"ready": False, "error": str(exc)}
    try:
        body["kanban"] = services.kanban.health()
    except Exception as exc:  # noqa: BLE001
        body["kanban"] = {"ready": False, "error": str(exc)}
    # The gate's own state too: between the last service opening and the gate opening, REST still answers
    # 503 starting, and a caller that trusted a 200 here would get it.
    ready = startup.is_open and startup.is_loaded and not loading and all(
        bool(body[part].get("ready", True)) for part in ("memory", "kanban"))
    body["loading"] = loading
    body["process_memory_mb"] = process_memory_mb()
    damage = body["memory"].get("table_damage")
    if damage:  # reads answer from the index and writes wait in the journal, but the table needs a repair
        body["status"], body["code"], body["detail"] = "degraded", "table_damaged", f"{damage}; run memory-mcp repair"
        return JSONResponse(body, status_code=503)
    body["status"] = "ok" if ready else "failed" if startup.failure is not None else "starting"
    return JSONResponse(body, status_code=200 if ready else 503)
