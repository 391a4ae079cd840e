"""LanceDB access: the shared table, its single writer, locks, retention, recovery and diagnostics.

The service uses ``Store`` (reads, searches, commits), ``Writer`` (the batching write queue) and
``open_with_recovery``; ``filters`` builds the where-clauses all of them take.
"""

from app.memory.store import filters
from app.memory.store.recovery import RecoveryReport, health_fields, open_with_recovery
from app.memory.store.table import Store
from app.memory.store.writer import Writer

__all__ = ["RecoveryReport", "Store", "Writer", "filters", "health_fields", "open_with_recovery"]
