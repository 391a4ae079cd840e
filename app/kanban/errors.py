"""Kanban errors: each subclasses a family from ``app.errors`` and sets a stable ``code``."""

from __future__ import annotations

from app.errors import Conflict, Forbidden, InvalidInput, NotFound, Unavailable


class TaskNotFound(NotFound):
    code = "task_not_found"


class JobNotFound(NotFound):
    code = "job_not_found"


class InvalidStatus(InvalidInput):
    code = "invalid_status"


class InvalidTaskId(InvalidInput):
    code = "invalid_task_id"


class TaskExists(Conflict):
    code = "task_exists"


class StatusConflict(Conflict):
    code = "status_conflict"


class JobNotConfigured(Unavailable):
    code = "job_not_configured"


class UnsafeJobCommand(InvalidInput):
    """The configured job command is not safe to run; raised at start-up."""

    code = "unsafe_job_command"


class JobRefusedAsRoot(Forbidden):
    """The server runs as root and MEMORY_MCP_JOBS_ALLOW_ROOT is not set: no job starts."""

    code = "job_refused_as_root"


class VaultEscape(Forbidden):
    code = "vault_escape"


class ObsidianFormatError(InvalidInput):
    code = "obsidian_format"


class BoardUnavailable(Unavailable):
    """The board's PostgreSQL database does not answer (or another writer held the board too long)."""

    code = "board_unavailable"
