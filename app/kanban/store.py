"""Task storage: ids, cards, notes and status history, on either backend. Synchronous; callers use a thread."""

from __future__ import annotations

import json
import time
from typing import Any

from app.kanban.backend import BoardDatabase, Connection, Row
from app.kanban.errors import StatusConflict, TaskExists, TaskNotFound
from app.kanban.models import COLUMN_TITLES, STATUSES, Board, Card, Column, HistoryEntry, Note, Task
from app.kanban.validation import format_task_id, task_number


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def _task(row: Row) -> Task:
    return Task(
        id=row["id"],
        title=row["title"],
        description=row["description"],
        assignee=row["assignee"],
        status=row["status"],
        steps=json.loads(row["steps"]),
        current_step=row["current_step"],
        priority=row["priority"],
        tags=json.loads(row["tags"]),
        created_ms=row["created_ms"],
        updated_ms=row["updated_ms"],
        retry_count=row["retry_count"],
    )


class TaskStore:
    """Reads and writes of tasks; every change is one transaction on ``db``."""

    def __init__(self, db: BoardDatabase) -> None:
        self.db = db

    # --- ids -------------------------------------------------------------------------------
    def _next_id(self, conn: Connection) -> tuple[str, int]:
        row = conn.execute("UPDATE counters SET value = value + 1 WHERE name = 'task' RETURNING value").fetchone()
        seq = int(row["value"])
        return format_task_id(seq), seq

    def _claim_id(self, conn: Connection, task_id: str) -> tuple[str, int]:
        seq = task_number(task_id)
        # Keep the counter ahead of explicit ids so that later automatic ids never collide; the
        # counter row is updated first, so every creator of a task takes its lock before looking.
        conn.execute("UPDATE counters SET value = CASE WHEN value < ? THEN ? ELSE value END WHERE name = 'task'",
                     (seq, seq))
        if conn.execute("SELECT 1 FROM tasks WHERE seq = ?", (seq,)).fetchone():
            raise TaskExists(f"task {format_task_id(seq)} already exists")
        return format_task_id(seq), seq

    # --- tasks -----------------------------------------------------------------------------
    def create(self, fields: dict[str, Any], *, task_id: str | None, actor: str | None,
               extra: dict[str, Any] | None = None, position: int | None = None) -> Task:
        """Insert a task and its first history entry (``None`` -> status).

        Raises:
            TaskExists: ``task_id`` is taken.
        """
        stamp = fields.pop("created_ms", None) or now_ms()
        with self.db.write() as conn:
            new_id, seq = self._claim_id(conn, task_id) if task_id else self._next_id(conn)
            if position is None:
                position = self._end_position(conn, fields["status"])
            conn.execute(
                """INSERT INTO tasks (id, seq, title, description, assignee, status, steps, current_step,
                   priority, tags, created_ms, updated_ms, retry_count, position, extra)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                (new_id, seq, fields["title"], fields.get("description", ""), fields["assignee"],
                 fields["status"], json.dumps(fields.get("steps", [])), fields.get("current_step"),
                 fields.get("priority"), json.dumps(fields.get("tags", [])), stamp,
                 fields.get("updated_ms") or stamp, fields.get("retry_count", 0), position,
                 json.dumps(extra or {})),
            )
            self._record(conn, new_id, None, fields["status"], actor, stamp)
            return self._get(conn, new_id)

    def _end_position(self, conn: Connection, status: str) -> int:
        row = conn.execute("SELECT COALESCE(MAX(position), -1) + 1 AS p FROM tasks WHERE status = ?",
                           (status,)).fetchone()
        return int(row["p"])

    def _record(self, conn: Connection, task_id: str, from_status: str | None, to_status: str,
                actor: str | None, at_ms: int) -> None:
        conn.execute("INSERT INTO history (task_id, from_status, to_status, actor, at_ms) VALUES (?, ?, ?, ?, ?)",
                      (task_id, from_status, to_status, actor, at_ms))

    def _get(self, conn: Connection, task_id: str, *, lock: bool = False) -> Task:
        """The task; with ``lock``, its row stays locked until the transaction ends. Raises: TaskNotFound."""
        sql = "SELECT * FROM tasks WHERE id = ?" + (self.db.lock_clause if lock else "")
        row = conn.execute(sql, (task_id,)).fetchone()
        if row is None:
            raise TaskNotFound(f"task {task_id} does not exist")
        return _task(row)

    def get(self, task_id: str) -> Task:
        """Raises: TaskNotFound."""
        with self.db.read() as conn:
            return self._get(conn, task_id)

    def detail(self, task_id: str) -> tuple[Task, list[Note], list[HistoryEntry]]:
        """The task with its notes and history, read in one snapshot. Raises: TaskNotFound."""
        with self.db.read() as conn:
            task = self._get(conn, task_id)
            notes = [Note(**dict(r)) for r in conn.execute(
                "SELECT id, task_id, author, text, created_ms FROM notes WHERE task_id = ? ORDER BY id", (task_id,))]
            history = [HistoryEntry(**dict(r)) for r in conn.execute(
                "SELECT task_id, from_status, to_status, actor, at_ms FROM history WHERE task_id = ? ORDER BY id",
                (task_id,))]
        return task, notes, history

    def find(self, status: str | None = None, assignee: str | None = None) -> list[Task]:
        sql, params = "SELECT * FROM tasks WHERE 1 = 1", []
        if status is not None:
            sql, params = sql + " AND status = ?", [*params, status]
        if assignee is not None:
            sql, params = sql + " AND assignee = ?", [*params, assignee]
        with self.db.read() as conn:
            return [_task(r) for r in conn.execute(sql + " ORDER BY seq", params)]

    def move(self, task_id: str, to_status: str, *, expected: str | None, actor: str | None) -> Task:
        """Compare-and-set of the status inside one write transaction.

        Raises:
            TaskNotFound, StatusConflict: the card is no longer in ``expected``.
        """
        with self.db.write() as conn:
            task = self._get(conn, task_id, lock=True)
            if expected is not None and task.status != expected:
                raise StatusConflict(
                    f"task {task_id} is '{task.status}', not '{expected}': another agent moved it first"
                )
            if task.status == to_status:
                return task
            stamp = now_ms()
            retry = task.retry_count
            if to_status == "running" and conn.execute(
                "SELECT 1 FROM history WHERE task_id = ? AND to_status = 'running'", (task_id,)
            ).fetchone():
                retry += 1  # back in progress after having run before: a retry
            # Conditional on the status just read: a claim can never overwrite another's claim.
            moved = conn.execute(
                "UPDATE tasks SET status = ?, position = ?, updated_ms = ?, retry_count = ? "
                "WHERE id = ? AND status = ?",
                (to_status, self._end_position(conn, to_status), stamp, retry, task_id, task.status),
            )
            if moved.rowcount != 1:
                raise StatusConflict(f"task {task_id} changed while it was being moved; read it again")
            self._record(conn, task_id, task.status, to_status, actor, stamp)
            return self._get(conn, task_id)

    def update(self, task_id: str, changes: dict[str, Any]) -> Task:
        """Apply already-validated field changes. Raises: TaskNotFound."""
        columns = {"title", "description", "assignee", "steps", "current_step", "priority", "tags", "retry_count"}
        values = {k: json.dumps(v) if k in ("steps", "tags") else v for k, v in changes.items() if k in columns}
        with self.db.write() as conn:
            self._get(conn, task_id, lock=True)
            if values:
                assignments = ", ".join(f"{name} = ?" for name in values)
                conn.execute(f"UPDATE tasks SET {assignments}, updated_ms = ? WHERE id = ?",  # noqa: S608
                             (*values.values(), now_ms(), task_id))
            return self._get(conn, task_id)

    def delete(self, task_id: str) -> Task:
        """Remove a task with its notes and history; its jobs stay, as the record of what ran.

        Raises:
            TaskNotFound.
        """
        with self.db.write() as conn:
            task = self._get(conn, task_id, lock=True)
            conn.execute("DELETE FROM notes WHERE task_id = ?", (task_id,))
            conn.execute("DELETE FROM history WHERE task_id = ?", (task_id,))
            conn.execute("DELETE FROM tasks WHERE id = ?", (task_id,))
            return task

    def add_note(self, task_id: str, text: str, author: str | None) -> Note:
        """Append a note (never overwrites). Raises: TaskNotFound."""
        stamp = now_ms()
        with self.db.write() as conn:
            self._get(conn, task_id, lock=True)
            row = conn.execute("INSERT INTO notes (task_id, author, text, created_ms) VALUES (?, ?, ?, ?) RETURNING id",
                               (task_id, author, text, stamp)).fetchone()
            conn.execute("UPDATE tasks SET updated_ms = ? WHERE id = ?", (stamp, task_id))
            return Note(id=int(row["id"]), task_id=task_id, author=author, text=text, created_ms=stamp)

    def board(self) -> Board:
        with self.db.read() as conn:
            rows = conn.execute(
                "SELECT id, title, assignee, updated_ms, priority, status FROM tasks ORDER BY position, seq"
            ).fetchall()
        cards: dict[str, list[Card]] = {status: [] for status in STATUSES}
        for row in rows:
            cards.setdefault(row["status"], []).append(
                Card(id=row["id"], title=row["title"], assignee=row["assignee"], updated_ms=row["updated_ms"],
                     priority=row["priority"]))
        return Board(columns=[Column(status=s, title=COLUMN_TITLES[s], cards=cards[s]) for s in STATUSES])

    def page(self, before_seq: int | None, limit: int) -> list[Task]:
        """Newest tasks first (by number), those numbered below ``before_seq`` when given."""
        sql, params = "SELECT * FROM tasks", []
        if before_seq is not None:
            sql, params = sql + " WHERE seq < ?", [before_seq]
        with self.db.read() as conn:
            return [_task(r) for r in conn.execute(sql + " ORDER BY seq DESC LIMIT ?", [*params, limit])]

    def ids_matching(self, prefix: str, limit: int) -> tuple[list[str], int]:
        """The newest ids that start with ``prefix`` (any case), or whose number does, and how many do."""
        text = prefix.strip().upper()
        digits = text[5:] if text.startswith("TASK-") else text
        with self.db.read() as conn:
            ids = [str(r["id"]) for r in conn.execute("SELECT id FROM tasks ORDER BY seq DESC")]
        if digits.isdigit():  # "12" and "TASK-0001" both find TASK-00012
            matched = [i for i in ids if i[5:].startswith(digits) or i[5:].lstrip("0").startswith(digits)]
        else:
            matched = [i for i in ids if i.startswith(text)]
        return matched[:limit], len(matched)

    def people(self) -> list[str]:
        """Every assignee and step owner on the board."""
        with self.db.read() as conn:
            rows = conn.execute("SELECT DISTINCT assignee, steps FROM tasks").fetchall()
        names = {str(r["assignee"]) for r in rows} | {str(s) for r in rows for s in json.loads(r["steps"])}
        return sorted(name for name in names if name)

    def count(self) -> int:
        with self.db.read() as conn:
            return int(conn.execute("SELECT COUNT(*) AS n FROM tasks").fetchone()["n"])

    # --- Obsidian round trip ---------------------------------------------------------------
    def extras(self) -> list[tuple[Task, dict[str, Any], int]]:
        """Every task with its stored import details and board position, in board order."""
        with self.db.read() as conn:
            rows = conn.execute("SELECT * FROM tasks ORDER BY position, seq").fetchall()
        return [(_task(r), json.loads(r["extra"]), int(r["position"])) for r in rows]

    def replace_imported(self, task_id: str, fields: dict[str, Any], extra: dict[str, Any], position: int,
                         actor: str | None) -> None:
        """Overwrite an existing task with imported values, recording a status change if any."""
        with self.db.write() as conn:
            old = self._get(conn, task_id, lock=True)
            conn.execute(
                """UPDATE tasks SET title = ?, description = ?, assignee = ?, status = ?, steps = ?,
                   current_step = ?, priority = ?, tags = ?, updated_ms = ?, position = ?, extra = ? WHERE id = ?""",
                (fields["title"], fields["description"], fields["assignee"], fields["status"],
                 json.dumps(fields["steps"]), fields["current_step"], fields["priority"], json.dumps(fields["tags"]),
                 now_ms(), position, json.dumps(extra), task_id),
            )
            if old.status != fields["status"]:
                self._record(conn, task_id, old.status, fields["status"], actor, now_ms())

    def get_meta(self, key: str) -> str | None:
        with self.db.read() as conn:
            row = conn.execute("SELECT value FROM board_meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row["value"])

    def set_meta(self, key: str, value: str) -> None:
        with self.db.write() as conn:
            conn.execute("INSERT INTO board_meta (key, value) VALUES (?, ?) "
                         "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (key, value))
