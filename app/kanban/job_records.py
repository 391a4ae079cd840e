"""Job records, on either backend: one row per started job, updated once when it ends."""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from app.kanban.backend import BoardDatabase, Connection, Row
from app.kanban.errors import JobNotFound
from app.kanban.models import Job


@dataclass
class JobOutcome:
    status: str
    exit_code: int | None
    ended_ms: int
    stdout: str
    stderr: str
    stdout_bytes: int
    stderr_bytes: int
    truncated: bool
    reason: str | None = None


def _start_ticks(pid: int) -> str | None:
    """The process's start time (clock ticks since boot, /proc/<pid>/stat field 22); None when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


@cache
def server_identity() -> str:
    """``host:pid:start``: this server process, told apart from a later one that reuses its pid."""
    return f"{socket.gethostname()}:{os.getpid()}:{_start_ticks(os.getpid())}"


def server_gone(identity: str | None) -> bool:
    """True when the server that started a job is dead; a server on another host is never judged from here."""
    if identity is None:
        return True  # recorded before servers were recorded
    host, pid, start = identity.rsplit(":", 2)
    if host != socket.gethostname():
        return False
    return not pid.isdigit() or _start_ticks(int(pid)) != start


def _job(row: Row) -> Job:
    values = dict(row)
    values.pop("pgid", None)
    values.pop("server", None)
    values.pop("rowid", None)  # PostgreSQL's stand-in for SQLite's implicit rowid
    values["argv"] = json.loads(values["argv"])
    values["truncated"] = bool(values["truncated"])
    return Job(**values)


class JobRecords:
    def __init__(self, db: BoardDatabase) -> None:
        self.db = db

    def insert(self, job: Job) -> None:
        with self.db.write() as conn:
            conn.execute(
                "INSERT INTO jobs (id, task_id, argv, status, started_ms, actor, server) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (job.id, job.task_id, json.dumps(job.argv), job.status, job.started_ms, job.actor, server_identity()),
            )

    def set_process(self, job_id: str, pid: int, pgid: int) -> None:
        with self.db.write() as conn:
            conn.execute("UPDATE jobs SET pid = ?, pgid = ? WHERE id = ?", (pid, pgid, job_id))

    def finish(self, job_id: str, outcome: JobOutcome) -> Job:
        with self.db.write() as conn:
            conn.execute(
                """UPDATE jobs SET status = ?, exit_code = ?, ended_ms = ?, stdout = ?, stderr = ?,
                   stdout_bytes = ?, stderr_bytes = ?, truncated = ?, reason = ? WHERE id = ?""",
                (outcome.status, outcome.exit_code, outcome.ended_ms, outcome.stdout, outcome.stderr,
                 outcome.stdout_bytes, outcome.stderr_bytes, int(outcome.truncated), outcome.reason, job_id),
            )
            return self._get(conn, job_id)

    def _get(self, conn: Connection, job_id: str) -> Job:
        row = conn.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise JobNotFound(f"job {job_id} does not exist")
        return _job(row)

    def get(self, job_id: str) -> Job:
        """Raises: JobNotFound."""
        with self.db.read() as conn:
            return self._get(conn, job_id)

    def find(self, task_id: str | None = None, limit: int = 50) -> list[Job]:
        sql, params = "SELECT * FROM jobs", []
        if task_id is not None:
            sql, params = sql + " WHERE task_id = ?", [task_id]
        with self.db.read() as conn:
            rows = conn.execute(sql + " ORDER BY started_ms DESC, rowid DESC LIMIT ?", [*params, limit]).fetchall()
        return [_job(r) for r in rows]

    def running(self) -> list[tuple[str, int | None]]:
        """(job id, process group) of every job recorded as running by a server that is gone.

        Several servers may share the board (a file, or PostgreSQL): another live server's jobs are its own.
        """
        with self.db.read() as conn:
            rows = conn.execute("SELECT id, pgid, server FROM jobs WHERE status = 'running'").fetchall()
        return [(r["id"], r["pgid"]) for r in rows if server_gone(r["server"])]

    def abandon(self, job_id: str, ended_ms: int, reason: str) -> None:
        with self.db.write() as conn:
            conn.execute("UPDATE jobs SET status = 'abandoned', ended_ms = ?, reason = ? "
                         "WHERE id = ? AND status = 'running'", (ended_ms, reason, job_id))
