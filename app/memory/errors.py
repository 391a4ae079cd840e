"""Errors of the memory domain; each has a stable ``code`` that REST and MCP pass through."""

from __future__ import annotations

from app.errors import Busy, Conflict, Forbidden, InvalidInput, NotFound


class MemoryNotFound(NotFound):
    code = "memory_not_found"


class InvalidScope(InvalidInput):
    code = "invalid_scope"


class InvalidText(InvalidInput):
    code = "invalid_text"


class InvalidTags(InvalidInput):
    code = "invalid_tags"


class InvalidId(InvalidInput):
    code = "invalid_id"


class ScopeForbidden(Forbidden):
    code = "scope_forbidden"


class EmbeddingModelMismatch(Conflict):
    """The table's vectors come from another model or dimension than the configured embedder."""

    code = "embedding_model_mismatch"


class StoreBusy(Busy):
    code = "store_busy"


class AlreadySuperseded(Conflict):
    """A memory that another one already replaced: supersede the newer one instead (no forks)."""

    code = "already_superseded"


class JournalUnavailable(Busy):
    """The write journal could not take the write (disk full, its database down): nothing was written."""

    code = "journal_unavailable"

    def __init__(self, message: str, *, retry_after_s: float = 2.0) -> None:
        super().__init__(message, retry_after_s=retry_after_s)


class JournalFull(Busy):
    """More rows wait in the journal than ``MEMORY_MCP_JOURNAL_MAX_ROWS``: the table is far behind."""

    code = "journal_full"


class TableDamaged(Busy):
    """The table cannot be read whole (files its manifest names are gone): ``memory-mcp repair``."""

    code = "table_damaged"
