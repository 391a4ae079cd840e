"""``memory-mcp backup`` / ``restore``: memories and the board travel together in one archive."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import anyio
import pytest

from app.cli import main
from app.kanban.models import TaskDetail
from app.kanban.service import KanbanService
from app.memory.service import MemoryService
from app.settings import Settings
from tests.conftest import SettingsFactory


@pytest.fixture(autouse=True)
def hash_embedder(make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    make_settings()  # clears MEMORY_MCP_* and moves to tmp_path
    monkeypatch.setenv("MEMORY_MCP_EMBEDDING_PROVIDER", "hash")


async def _fill(make_settings: SettingsFactory, where: Path) -> None:
    settings = make_settings(db_path=where / "lancedb", kanban_db=where / "kanban.sqlite3")
    async with MemoryService.open(settings) as memory:
        await memory.create("the staging database is rebuilt every night", scope="global")
        await memory.create("deploys need a green CI run", scope="agent:claude-code")
    async with KanbanService.open(settings) as kanban:
        task = await kanban.create_task("Ship the backup command", "claude-code")
        await kanban.add_note(task.id, "with the board inside", author="lead")


async def _read(settings: Settings) -> tuple[list[str], list[str], TaskDetail]:
    async with MemoryService.open(settings) as memory:
        found = await memory.list_memories(limit=10)
    async with KanbanService.open(settings) as kanban:
        [task] = await kanban.list_tasks()
        detail = await kanban.get_task(task.id)
    return sorted(m.text for m in found), sorted(m.scope for m in found), detail


def _cli(where: Path, *words: str) -> int:
    return main([*words, "--db", str(where / "lancedb"), "--kanban-db", str(where / "kanban.sqlite3")])


def test_a_backup_restores_memories_and_board_into_an_empty_place(
        make_settings: SettingsFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source, target = tmp_path / "source", tmp_path / "target"
    anyio.run(_fill, make_settings, source)
    archive = tmp_path / "backup.tar.gz"

    assert _cli(source, "backup", str(archive)) == 0
    assert "backed up 2 memories and the board (1 tasks)" in capsys.readouterr().err
    with tarfile.open(archive) as opened:
        assert sorted(opened.getnames()) == ["board.sqlite3", "manifest.json", "memories.jsonl"]
    assert _cli(target, "restore", str(archive)) == 0
    assert "restored 2 memories (0 already there)" in capsys.readouterr().err

    texts, scopes, detail = anyio.run(_read, make_settings(db_path=target / "lancedb",
                                                           kanban_db=target / "kanban.sqlite3"))
    assert texts == ["deploys need a green CI run", "the staging database is rebuilt every night"]
    assert scopes == ["agent:claude-code", "global"]
    assert detail.title == "Ship the backup command" and [n.text for n in detail.notes] == ["with the board inside"]


def test_restore_never_replaces_a_board_with_tasks_unless_asked(
        make_settings: SettingsFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source, busy = tmp_path / "source", tmp_path / "busy"
    anyio.run(_fill, make_settings, source)
    anyio.run(_fill, make_settings, busy)
    archive = tmp_path / "backup.tar.gz"
    assert _cli(source, "backup", str(archive)) == 0
    before = (busy / "kanban.sqlite3").read_bytes()

    assert _cli(busy, "restore", str(archive)) == 1
    said = capsys.readouterr().err
    # The memories are restored all the same (its own two have other ids); the board is kept, and it says so.
    assert "restored 2 memories (0 already there)" in said and "but not the board" in said
    assert "already holds 1 tasks and was left as it was" in said and "--replace-board" in said
    assert (busy / "kanban.sqlite3").read_bytes() == before
    assert _cli(busy, "restore", str(archive), "--replace-board") == 0
    assert "restored 0 memories (2 already there)" in capsys.readouterr().err
    texts, _, _ = anyio.run(_read, make_settings(db_path=busy / "lancedb", kanban_db=busy / "kanban.sqlite3"))
    assert len(texts) == 4


def test_a_command_reports_the_time_its_caller_waited_imports_included(tmp_path: Path) -> None:
    env = {**os.environ, "MEMORY_MCP_EMBEDDING_PROVIDER": "hash"}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "app.cli", "backup", str(tmp_path / "b.tar.gz"), "--db",
                           str(tmp_path / "lancedb"), "--kanban-db", str(tmp_path / "k.sqlite3")],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    waited = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    reported = float(re.search(r" in ([0-9.]+) s", done.stderr).group(1))
    # The imports alone are most of a small backup: a clock started inside the command said a tenth of this.
    assert 0.5 * waited <= reported <= waited + 0.1, (reported, waited)


def test_restore_of_something_else_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notes.txt").write_text("not an archive")
    assert _cli(tmp_path, "restore", str(tmp_path / "notes.txt")) == 2
    assert "cannot read" in capsys.readouterr().err
