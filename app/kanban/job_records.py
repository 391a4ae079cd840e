"""Job records, on either backend: one row per started job, updated once when it ends."""

from __future__ import annotations

import json
from dataclasses import dataclass

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


def _job(row: Row) -> Job:
    values = dict(row)
    values.pop("pgid", None)
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
                "INSERT INTO jobs (id, task_id, argv, status, started_ms, actor) VALUES (?, ?, ?, ?, ?, ?)",
                (job.id, job.task_id, json.dumps(job.argv), job.status, job.started_ms, job.actor),
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
        """(job id, process group) of every job recorded as running."""
        with self.db.read() as conn:
            rows = conn.execute("SELECT id, pgid FROM jobs WHERE status = 'running'").fetchall()
        return [(r["id"], r["pgid"]) for r in rows]

    def abandon(self, job_id: str, ended_ms: int, reason: str) -> None:
        with self.db.write() as conn:
            conn.execute("UPDATE jobs SET status = 'abandoned', ended_ms = ?, reason = ? "
                         "WHERE id = ? AND status = 'running'", (ended_ms, reason, job_id))
