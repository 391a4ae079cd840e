"""``doctor``'s look at the write journal: where it is, how many writes wait for the table, and for how long."""

from __future__ import annotations

import time

from app.memory.errors import JournalUnavailable
from app.memory.store.diagnostics import Check
from app.settings import Settings

#: A write waiting longer than this means no flusher reaches the table (a server down, a lock held, damage).
STUCK_S = 60.0


def check_journal(settings: Settings) -> Check:
    """Depth and the oldest unflushed write's age, read from the journal itself (no server needed)."""
    from app.memory.journal.writer import local_journal_path, open_journal

    local = local_journal_path(settings)
    if local is not None and not local.exists():
        return Check(name="journal", status="ok", detail=f"{local}: none yet (no server has written here)")
    try:
        journal, lease = open_journal(settings)
    except JournalUnavailable as exc:
        return Check(name="journal", status="fail", detail=exc.message,
                     fix="free disk space, or bring the team database back (MEMORY_MCP_TEAM_DB)")
    try:
        depth = journal.depth()
    finally:
        journal.close()
        if lease is not None:
            lease.close()
    where = f"{journal.where}: "
    if depth.rows == 0:
        return Check(name="journal", status="ok", detail=where + "every acknowledged write is in the table")
    age = max(0.0, time.time() - (depth.oldest_ms or 0) / 1000)
    detail = where + f"{depth.rows} acknowledged write(s) not yet in the table, the oldest {age:.1f} s ago"
    if age < STUCK_S and depth.rows < settings.journal_max_rows // 2:
        return Check(name="journal", status="ok", detail=detail)
    return Check(name="journal", status="warn", detail=detail + f" (bound {settings.journal_max_rows} rows)",
                 fix="start memory-mcp serve on this table: its flusher folds them in; if one runs, see its log "
                     "(a held write lock, or damage)")
