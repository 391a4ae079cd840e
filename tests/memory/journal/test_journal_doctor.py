"""``doctor`` reads the journal itself: how many acknowledged writes wait for the table, and since when."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from app.memory.journal import health
from app.memory.journal.entries import Entry
from app.memory.journal.health import check_journal
from app.memory.journal.sqlite_journal import SqliteJournal, default_path
from tests.conftest import SettingsFactory

REPO = Path(__file__).resolve().parents[3]


def _waiting(settings_db: Path, rows: int) -> None:
    """Writes a server journaled and acknowledged, then died before flushing."""
    journal = SqliteJournal(default_path(settings_db), "memories")
    try:
        if rows:
            journal.append([Entry("add", f"m{i}", {"id": f"m{i}", "text": "t", "vector": np.ones(4, np.float32)})
                            for i in range(rows)])
    finally:
        journal.close()


def test_an_empty_journal_is_ok_and_waiting_writes_are_counted(make_settings: SettingsFactory,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    settings = make_settings()
    assert check_journal(settings).status == "ok" and "none yet" in check_journal(settings).detail
    _waiting(settings.db_path, 0)  # type: ignore[arg-type]
    assert check_journal(settings).status == "ok" and "every acknowledged write is in the table" in \
        check_journal(settings).detail
    _waiting(settings.db_path, 3)  # type: ignore[arg-type]
    fresh = check_journal(settings)
    assert fresh.status == "ok" and "3 acknowledged write(s) not yet in the table" in fresh.detail
    monkeypatch.setattr(health, "STUCK_S", 0.0)  # as if they had waited past the threshold
    stuck = check_journal(settings)
    assert stuck.status == "warn" and stuck.fix is not None and "memory-mcp serve" in stuck.fix


def test_doctor_prints_the_journal_check(make_settings: SettingsFactory, tmp_path: Path) -> None:
    settings = make_settings()
    _waiting(settings.db_path, 2)  # type: ignore[arg-type]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(REPO),
           "MEMORY_MCP_DB_PATH": str(settings.db_path), "MEMORY_MCP_KANBAN_DB": str(tmp_path / "k.sqlite3"),
           "MEMORY_MCP_EMBEDDING_PROVIDER": "hash", "MEMORY_MCP_OPENCLAW_CONFIG": ""}
    done = subprocess.run([sys.executable, "-m", "app.cli", "doctor", "--json"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)
    [journal] = [c for c in json.loads(done.stdout)["checks"] if c["name"] == "journal"]
    assert "2 acknowledged write(s) not yet in the table" in journal["detail"]
    assert str(default_path(settings.db_path)) in journal["detail"]  # type: ignore[arg-type]


async def test_backup_holds_the_writes_of_a_server_that_died_before_it_flushed(
        make_settings: SettingsFactory, tmp_path: Path) -> None:
    from app.memory.service import MemoryService

    settings = make_settings(flush_interval_s=3600)  # the flusher's first round only: the rest waits
    async with MemoryService.open(settings) as service:
        await service.remember("flushed at once")
        await service.writer.flush()
        waiting = [(await service.remember(f"journaled, not flushed {i}")).memory_id for i in range(3)]
        service.writer.flusher.close = lambda: _no_final_flush()  # type: ignore[method-assign]  # as kill -9 leaves it
    # The flusher's own first round may have taken some of them; at least one waits in the journal.
    assert re.search(r": [123] acknowledged write\(s\) not yet in the table", check_journal(settings).detail)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(REPO),
           "MEMORY_MCP_DB_PATH": str(settings.db_path), "MEMORY_MCP_KANBAN_DB": str(settings.kanban_db),
           "MEMORY_MCP_EMBEDDING_PROVIDER": "hash", "MEMORY_MCP_OPENCLAW_CONFIG": ""}
    archive = tmp_path / "backup.tar.gz"
    argv = [sys.executable, "-m", "app.cli", "backup", str(archive)]
    done = await asyncio.to_thread(subprocess.run, argv, env=env, cwd=tmp_path, capture_output=True, text=True,
                                   timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "backed up 4 memories" in done.stderr
    assert check_journal(settings).detail.endswith("every acknowledged write is in the table")
    import lancedb

    stored = lancedb.connect(str(settings.db_path)).open_table("memories").to_arrow().column("id").to_pylist()
    assert set(waiting) <= set(stored) and len(stored) == 4


async def _no_final_flush() -> None:
    """A flusher that stops without folding what waits (the process died)."""
