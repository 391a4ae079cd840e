"""LanceDB access: the shared table, its commits, locks, retention, recovery and diagnostics.

The service uses ``Store`` (reads, searches, commits: the journal's flusher is its one writer) and
``open_with_recovery``; ``filters`` builds the where-clauses all of them take.

The names are imported on first use: ``Store`` imports LanceDB, which takes about two seconds, and the
server answers ``/healthz`` before it opens the store (docs/performance.md, 'Start-up').
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.memory.store import filters
    from app.memory.store.recovery import RecoveryReport, health_fields, open_with_recovery
    from app.memory.store.table import Store

_HOMES = {
    "filters": "app.memory.store.filters",
    "RecoveryReport": "app.memory.store.recovery",
    "health_fields": "app.memory.store.recovery",
    "open_with_recovery": "app.memory.store.recovery",
    "Store": "app.memory.store.table",
}

__all__ = ["RecoveryReport", "Store", "filters", "health_fields", "open_with_recovery"]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(home)
    value = module if home.endswith(f".{name}") else getattr(module, name)
    globals()[name] = value
    return value
