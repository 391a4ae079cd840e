"""Folding a journal into its table from a command (``backup``, ``export``), not a server: what a server's
flusher does, under the same lock, so the table holds every acknowledged write before it is read. Safe
beside a running server (the lock and the journal's flush record order the two), and the way to get the
writes out of the journal of a server that died before it could flush them."""

from __future__ import annotations

import logging

from app.memory.journal.flusher import Flusher
from app.memory.journal.overlay import Overlay
from app.memory.journal.writer import local_journal_path, open_journal
from app.settings import Settings

logger = logging.getLogger(__name__)


def fold_journal(settings: Settings) -> int:
    """Flush every entry no flush has folded in yet (blocking); returns how many. Nothing to do, or another
    instance holds the team's flush lease (it folds them in), is 0. A table that does not exist yet: 0."""
    from app.memory.store import connection
    from app.memory.store.table import Store

    local = local_journal_path(settings)
    if (settings.db_dir is not None and not settings.db_dir.is_dir()) or (local is not None and not local.exists()):
        return 0  # no table, or nothing ever journaled here
    journal, lease = open_journal(settings)
    try:
        if journal.depth().rows == 0 or (lease is not None and not lease.held()):
            return 0
        try:
            table = connection.connect(settings).open_table(settings.table)
        except (FileNotFoundError, ValueError):
            return 0
        store = Store(table, settings.db_path, connection.commit_lock(settings), appender=table,
                      storage_options=settings.storage_options, opener=None)
        flusher = Flusher(store, journal, Overlay(), settings)
        folded = 0
        while (done := flusher.round()) is not None:
            folded += done.entries
        if folded:
            logger.info("folded %d journaled write(s) into %s/%s", folded, settings.db_uri, settings.table)
        return folded
    finally:
        journal.close()
        if lease is not None:
            lease.close()
