"""Copy a SQLite board into an empty PostgreSQL board: tasks, notes, history, jobs, the Obsidian layout, the audit log.

Ids, numbers and timestamps are kept as they are (``TASK-00007`` stays ``TASK-00007``, and the next
new task continues after the highest number), all in one transaction: the target holds the whole
board or nothing. A target that already holds anything is refused, so a second run changes nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from app.errors import Conflict, InvalidInput
from app.kanban.db import Database
from app.kanban.job_audit import audit_path
from app.kanban.postgres import PostgresDatabase

TABLES: dict[str, tuple[str, ...]] = {
    "tasks": ("id", "seq", "title", "description", "assignee", "status", "steps", "current_step", "priority", "tags",
              "created_ms", "updated_ms", "retry_count", "position", "extra"),
    "notes": ("id", "task_id", "author", "text", "created_ms"),
    "history": ("id", "task_id", "from_status", "to_status", "actor", "at_ms"),
    # In the order the jobs were recorded (SQLite's rowid), which PostgreSQL's jobs.rowid then numbers.
    "jobs": ("id", "task_id", "argv", "status", "exit_code", "started_ms", "ended_ms", "pid", "pgid", "stdout",
             "stderr", "stdout_bytes", "stderr_bytes", "truncated", "reason", "actor", "server"),
    "board_meta": ("key", "value"),
}
ORDER = {"tasks": "seq", "notes": "id", "history": "id", "jobs": "rowid", "board_meta": "key"}
IDENTITY_COLUMNS = (("notes", "id"), ("history", "id"), ("jobs", "rowid"), ("job_audit", "id"))


class BoardNotEmpty(Conflict):
    code = "board_not_empty"


class CopyReport(BaseModel):
    tasks: int = 0
    notes: int = 0
    history: int = 0
    jobs: int = 0
    board_meta: int = 0
    audit_entries: int = 0
    next_task_number: int = 1


def _audit_rows(source: Path) -> list[tuple[int, str]]:
    path = audit_path(source)
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            try:
                at_ms = int(json.loads(line).get("at_ms") or 0)
            except (ValueError, AttributeError):
                at_ms = 0  # kept as written: the log is for people, a damaged line still says something
            rows.append((at_ms, line))
    return rows


def _refuse_unless_empty(target: PostgresDatabase) -> None:
    with target.read() as conn:
        held = {table: int(conn.execute(f"SELECT COUNT(*) AS n FROM {table}").fetchone()["n"])  # noqa: S608
                for table in (*TABLES, "job_audit")}
        counter = int(conn.execute("SELECT value FROM counters WHERE name = 'task'").fetchone()["value"])
    if any(held.values()) or counter:
        what = ", ".join(f"{n} {table}" for table, n in held.items() if n) or f"task counter at {counter}"
        raise BoardNotEmpty(f"refusing to copy: the board at {target.location} is not empty ({what}); "
                            "copy into a new, empty database")


def copy_board(source: Path, target: PostgresDatabase) -> CopyReport:
    """Copy the SQLite board at ``source`` into ``target`` (migrated here), which must be empty.

    Raises:
        InvalidInput: ``source`` is not a file. BoardNotEmpty: the target holds a board already.
        BoardUnavailable: the target does not answer.
    """
    if not source.is_file():
        raise InvalidInput(f"no SQLite board at {source}")
    target.migrate()
    _refuse_unless_empty(target)
    db = Database(source)
    try:
        db.migrate()
        with db.read() as conn:
            rows = {table: [tuple(r[c] for c in columns) for r in conn.execute(
                f"SELECT {', '.join(columns)} FROM {table} ORDER BY {ORDER[table]}")]  # noqa: S608
                for table, columns in TABLES.items()}
            counter = int(conn.execute("SELECT value FROM counters WHERE name = 'task'").fetchone()["value"])
    finally:
        db.close()
    audit = _audit_rows(source)
    with target.write() as conn:
        for table, columns in TABLES.items():
            sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"  # noqa: S608
            conn.executemany(sql, rows[table])
        conn.executemany("INSERT INTO job_audit (at_ms, entry) VALUES (?, ?)", audit)
        conn.execute("UPDATE counters SET value = ? WHERE name = 'task'", (counter,))
        for table, column in IDENTITY_COLUMNS:  # new rows continue after the copied ones
            conn.execute(f"SELECT setval(pg_get_serial_sequence('{table}', '{column}'), "  # noqa: S608
                         f"COALESCE((SELECT MAX({column}) FROM {table}), 0) + 1, false)")
    counts = {table: len(values) for table, values in rows.items()}
    return CopyReport(**counts, audit_entries=len(audit), next_task_number=counter + 1)
