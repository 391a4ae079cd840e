"""Obsidian import and export: the sample vault, byte-stable round trips, changes, safety."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st

from app.cli import main as cli_main
from app.errors import InvalidInput
from app.kanban.db import Database
from app.kanban.errors import VaultEscape
from app.kanban.obsidian import parse_board
from app.kanban.obsidian_io import export_obsidian, import_obsidian
from app.kanban.store import TaskStore
from app.kanban.validation import check_title
from app.settings import Settings
from tests.kanban.conftest import migrated
from tests.kanban.obsidian_fixture import BOARD, snapshot, write_vault


@pytest.fixture
def store(settings: Settings) -> Iterator[TaskStore]:
    db = migrated(settings)
    yield TaskStore(db)
    db.close()


@pytest.fixture
def vault(tmp_path: Path) -> Path:
    return write_vault(tmp_path / "vault")


def fresh_store(path: Path) -> TaskStore:
    db = Database(path)
    db.migrate()
    return TaskStore(db)


def test_import_reads_columns_cards_and_front_matter(store: TaskStore, vault: Path) -> None:
    report = import_obsidian(store, vault)
    assert (report.created, report.updated, report.cards) == (6, 0, 6)
    assert report.skipped_columns == ["## 🗂 Someday"]
    tasks = {t.id: t for t in store.find()}
    assert {t: tasks[t].status for t in tasks} == {
        "TASK-00001": "todo", "TASK-00002": "todo", "TASK-00003": "running",
        "TASK-00004": "backlog", "TASK-00005": "done", "TASK-00006": "blocked",
    }
    fix = tasks["TASK-00001"]
    assert (fix.title, fix.assignee, fix.steps, fix.current_step) == (
        "Fix login bug", "claude-code", ["claude-code", "antigravity"], 1)
    assert fix.description.startswith("## Goal\nUsers cannot log in") and fix.description.endswith("- [ ] fix")
    dark = tasks["TASK-00002"]
    assert (dark.assignee, dark.tags, dark.priority) == ("openclaw", ["ui", "theme"], "high")
    migrate = tasks["TASK-00003"]
    assert (migrate.steps, migrate.current_step, migrate.description) == (
        ["claude-code", "antigravity", "openclaw"], 2, "Move the tables.")
    assert tasks["TASK-00004"].description == "Only a description, no front matter."
    assert (tasks["TASK-00006"].title, tasks["TASK-00006"].assignee) == ("Waiting on API keys", "ops'team")
    assert store.create({"title": "n", "assignee": "a", "status": "todo"}, task_id=None, actor=None).id == "TASK-00007"


def test_import_then_export_is_byte_stable(store: TaskStore, vault: Path, tmp_path: Path) -> None:
    import_obsidian(store, vault)
    out = tmp_path / "exported"
    report = export_obsidian(store, out)
    assert report.task_files == 6
    assert snapshot(out) == snapshot(vault)


def test_export_into_the_same_vault_touches_no_file(store: TaskStore, vault: Path) -> None:
    import_obsidian(store, vault)
    before = {p: p.stat().st_mtime_ns for p in vault.rglob("*.md")}
    export_obsidian(store, vault / "Kanban.md")
    assert {p: p.stat().st_mtime_ns for p in vault.rglob("*.md")} == before
    assert not list(vault.rglob("*.tmp"))


def test_crlf_board_with_a_bom_round_trips(store: TaskStore, tmp_path: Path) -> None:
    vault = write_vault(tmp_path / "crlf", board="\ufeff" + BOARD.replace("\n", "\r\n"))
    import_obsidian(store, vault)
    export_obsidian(store, tmp_path / "out")
    assert snapshot(tmp_path / "out") == snapshot(vault)


def test_export_after_changes_moves_cards_and_keeps_what_it_does_not_model(
    store: TaskStore, vault: Path, tmp_path: Path
) -> None:
    import_obsidian(store, vault)
    store.move("TASK-00002", "review", expected=None, actor="agent")
    store.update("TASK-00001", {"assignee": "openclaw"})
    store.create({"title": "Brand new: task", "assignee": "claude-code", "status": "todo", "description": "Why."},
                 task_id=None, actor=None)
    out = tmp_path / "out"
    export_obsidian(store, out)
    board = (out / "Kanban.md").read_text()
    todo = board.split("## 📅 Todo")[1].split("## 🏃")[0]
    review = board.split("## 👀 Review")[1].split("## ✅")[0]
    assert "TASK-00002" not in todo and "- [ ] [[TASK-00002-Add dark mode]]" in review
    assert "- [ ] [[TASK-00007-Brand-new-task]]\n" in todo and "Call the vendor about licences" in todo
    assert "- [ ] [[TASK-00009-Maybe later]]" in board and board.endswith("```\n%%")
    note = (out / "task" / "TASK-00001-Fix login bug.md").read_text()
    assert note.startswith("---\nassignee: openclaw\ncurrent_step: 1\nstep1: claude-code\n")
    assert "created: 2026-11-30\n" in note
    assert (out / "task" / "TASK-00002-Add dark mode.md").read_bytes() == (
        vault / "task" / "TASK-00002-Add dark mode.md").read_bytes()
    new_note = (out / "task" / "TASK-00007-Brand-new-task.md").read_text()
    assert new_note == '---\ntitle: "Brand new: task"\nassignee: claude-code\n---\n\nWhy.\n'
    again = fresh_store(tmp_path / "again.sqlite3")
    import_obsidian(again, out)
    assert {(t.id, t.title, t.status, t.assignee) for t in again.find()} == {
        (t.id, t.title, t.status, t.assignee) for t in store.find()}
    again.db.close()


def test_default_layout_export_imports_back_and_is_then_stable(store: TaskStore, tmp_path: Path) -> None:
    store.create({"title": "Alpha", "assignee": "a", "status": "todo"}, task_id=None, actor=None)
    store.create({"title": "Beta", "assignee": "b", "status": "done", "description": "Done."},
                 task_id=None, actor=None)
    first = tmp_path / "first"
    export_obsidian(store, first)
    board = (first / "Kanban.md").read_text()
    assert board.startswith("---\n\nkanban-plugin: basic\n\n---\n\n## 📋 Backlog\n")
    assert "## 📅 Todo\n\n- [ ] [[TASK-00001-Alpha]]\n" in board and "- [x] [[TASK-00002-Beta]]" in board
    again = fresh_store(tmp_path / "again.sqlite3")
    import_obsidian(again, first)
    export_obsidian(again, tmp_path / "second")
    assert snapshot(tmp_path / "second") == snapshot(first)
    again.db.close()


def test_board_parser_is_linear_on_pathological_input() -> None:
    nasty = "- [ ] [[" + "[[" * 200_000 + "\n" + ("- [ ] [[TASK-00001-" + "]" * 50 + "\n") * 20_000
    started = time.perf_counter()
    _, cards, _ = parse_board("## Todo\n" + nasty)
    assert time.perf_counter() - started < 5.0  # generous: a backtracking regex would take minutes
    assert len(cards) == 1  # the same task twice is kept as text after the first card


def test_a_note_symlinked_outside_the_vault_is_refused(store: TaskStore, vault: Path, tmp_path: Path) -> None:
    secret = tmp_path / "outside.md"
    secret.write_text("---\nassignee: x\n---\nsecret\n")
    note = vault / "task" / "TASK-00001-Fix login bug.md"
    note.unlink()
    note.symlink_to(secret)
    with pytest.raises(VaultEscape):
        import_obsidian(store, vault)


def test_cli_imports_and_exports_a_vault(vault: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        kanban_db: Path | str) -> None:
    db = str(kanban_db)
    assert cli_main(["kanban", "import-obsidian", str(vault), "--kanban-db", db]) == 0
    assert "imported 6 cards" in capsys.readouterr().out
    assert cli_main(["kanban", "export-obsidian", str(tmp_path / "cli-out"), "--kanban-db", db]) == 0
    assert snapshot(tmp_path / "cli-out") == snapshot(vault)
    assert cli_main(["kanban", "import-obsidian", str(tmp_path / "missing"), "--kanban-db", db]) == 1


def _valid_title(text: str) -> bool:
    try:
        return check_title(text) == text
    except InvalidInput:
        return False


@pytest.mark.slow
@hyp_settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(titles=st.lists(st.text(min_size=1, max_size=40).filter(_valid_title), min_size=1, max_size=8))
def test_any_valid_title_survives_export_and_import(titles: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        source = fresh_store(root / "a.sqlite3")
        for index, title in enumerate(titles):
            status = ("todo", "done", "blocked")[index % 3]
            source.create({"title": title, "assignee": "a", "status": status}, task_id=None, actor=None)
        export_obsidian(source, root / "vault")
        target = fresh_store(root / "b.sqlite3")
        import_obsidian(target, root / "vault")
        assert [(t.id, t.title, t.status) for t in target.find()] == [(t.id, t.title, t.status) for t in source.find()]
        source.db.close()
        target.db.close()
