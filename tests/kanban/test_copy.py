"""``memory-mcp kanban migrate``: a SQLite board copied into PostgreSQL, whole, once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli import main as cli_main
from app.kanban.job_audit import audit_path
from app.kanban.job_records import JobOutcome, JobRecords
from app.kanban.models import Job, TaskDetail
from app.kanban.service import KanbanService
from tests.conftest import SettingsFactory
from tests.kanban.conftest import audit_entries, migrated


async def _fill(kanban: KanbanService) -> None:
    first = await kanban.create_task("Design", "lead", "the *plan*", steps=["a", "b"], tags=["x"], priority="high")
    second = await kanban.create_task("Build", "claude-code", task_id="TASK-00042")
    third = await kanban.create_task("Ship", "openclaw")
    await kanban.move_card(first.id, "running", expected_status="todo", actor="a")
    await kanban.move_card(first.id, "review", actor="b")
    await kanban.add_note(first.id, "one", author="a")
    await kanban.add_note(second.id, "two", author=None)
    await kanban.delete_task(third.id)
    kanban.tasks.set_meta("obsidian_board", json.dumps({"layout": {"newline": "\n"}, "board_file": "Kanban.md"}))


async def _details(kanban: KanbanService) -> list[TaskDetail]:
    return [await kanban.get_task(task.id) for task in await kanban.list_tasks()]


async def test_migrate_copies_the_whole_board_and_numbering_continues(
    make_settings: SettingsFactory, tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "board.sqlite3"
    sqlite_settings = make_settings(kanban_db=source)
    async with KanbanService.open(sqlite_settings) as kanban:
        await _fill(kanban)
        other = migrated(sqlite_settings)
        records = JobRecords(other)
        records.insert(Job(id="job-1", task_id="TASK-00001", argv=["run", "--"], status="running", started_ms=5))
        records.finish("job-1", JobOutcome("failed", 3, 9, "out\x00put", "err", 7, 3, False, "exit code 3"))
        other.close()
        kanban.audit.record(at_ms=9, actor="lead", job_id="job-1", status="failed")
        before, board, jobs = await _details(kanban), await kanban.get_board(), await kanban.list_jobs()
    assert cli_main(["kanban", "migrate", "--from", str(source), "--to", postgres_url]) == 0
    out = capsys.readouterr().out
    assert "copied 2 tasks, 2 notes, 4 history entries, 1 jobs and 1 audit entries" in out
    assert "the next new task is TASK-00044" in out

    pg_settings = make_settings(kanban_db=postgres_url)
    async with KanbanService.open(pg_settings) as kanban:
        after = await _details(kanban)
        assert [d.model_dump(exclude={"jobs"}) for d in after] == [d.model_dump(exclude={"jobs"}) for d in before]
        assert await kanban.get_board() == board
        assert [j.id for j in await kanban.list_jobs()] == [j.id for j in jobs]
        assert (await kanban.get_job("job-1")).stdout == "out\ufffdput"  # PostgreSQL text holds no NUL
        assert (await kanban.create_task("Next", "a")).id == "TASK-00044"
        note = await kanban.add_note("TASK-00001", "after the copy")
        assert note.id == max(n.id for d in before for n in d.notes) + 1
    assert audit_entries(pg_settings) == [json.loads(line) for line in audit_path(source).read_text().splitlines()]


async def test_migrate_refuses_a_board_that_is_not_empty_and_changes_nothing(
    make_settings: SettingsFactory, tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "board.sqlite3"
    async with KanbanService.open(make_settings(kanban_db=source)) as kanban:
        await kanban.create_task("Only", "a")
    assert cli_main(["kanban", "migrate", "--from", str(source), "--to", postgres_url]) == 0
    async with KanbanService.open(make_settings(kanban_db=postgres_url)) as kanban:
        await kanban.add_note("TASK-00001", "made in PostgreSQL")
        capsys.readouterr()
        assert cli_main(["kanban", "migrate", "--from", str(source), "--to", postgres_url]) == 1
        err = capsys.readouterr().err
        assert "refusing to copy" in err and "1 tasks" in err and "1 notes" in err
        [task] = await kanban.list_tasks()
        assert [n.text for n in (await kanban.get_task(task.id)).notes] == ["made in PostgreSQL"]


def test_migrate_names_what_is_wrong_with_its_arguments(tmp_path: Path, postgres_url: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["kanban", "migrate", "--from", str(tmp_path / "absent.sqlite3"), "--to", postgres_url]) == 1
    assert "no SQLite board at" in capsys.readouterr().err
    assert cli_main(["kanban", "migrate", "--from", str(tmp_path / "a"), "--to", str(tmp_path / "b.sqlite3")]) == 2
    assert "--to must be a postgresql:// URL" in capsys.readouterr().err
    assert cli_main(["kanban", "migrate", "--from", str(tmp_path / "a"), "--to", "mysql://h/db"]) == 2
    assert "postgresql:// URL" in capsys.readouterr().err


async def test_doctor_checks_the_board_in_postgresql_not_a_local_file(
    make_settings: SettingsFactory, postgres_url: str
) -> None:
    from app.cli.data import check_kanban_postgres

    empty = check_kanban_postgres(postgres_url)
    assert empty.status == "ok" and "no board yet" in empty.detail
    async with KanbanService.open(make_settings(kanban_db=postgres_url)) as kanban:
        await kanban.create_task(title="checked by doctor", assignee="claude-code")
    ready = check_kanban_postgres(postgres_url)
    assert ready.status == "ok" and "(1 tasks, schema 2)" in ready.detail
    gone = check_kanban_postgres(postgres_url.rsplit("/", 1)[0] + "/no_such_database")
    assert gone.status == "fail" and "does not answer" in gone.detail and gone.fix
