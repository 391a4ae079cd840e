"""Tasks on a real SQLite file and a real PostgreSQL: ids, statuses, history, claims, notes, patches."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from app.errors import InvalidInput
from app.kanban import db as sqlite_db
from app.kanban import postgres
from app.kanban.errors import InvalidStatus, InvalidTaskId, StatusConflict, TaskExists, TaskNotFound
from app.kanban.models import STATUSES, TaskPatch
from app.kanban.service import KanbanService
from app.kanban.store import TaskStore
from app.settings import Settings
from tests.kanban.conftest import migrated

REPO = Path(__file__).resolve().parents[2]
FIELDS = {"assignee": "claude-code", "status": "todo"}

CHILD = """
import sys
from app.kanban.backend import open_database
from app.kanban.store import TaskStore
from app.settings import Settings
db = open_database(Settings(kanban_db=sys.argv[1], embedding_provider="hash"))
db.migrate()
store = TaskStore(db)
sys.stdin.read(1)  # the parent releases every child at once
ids = [store.create({"title": "p", "assignee": "a", "status": "todo"}, task_id=None, actor="p").id
       for _ in range(int(sys.argv[2]))]
print(" ".join(ids))
"""


def test_ids_are_unique_and_sequential_under_concurrent_thread_creates(settings: Settings) -> None:
    db = migrated(settings)
    store = TaskStore(db)
    start = threading.Barrier(8)
    ids: list[str] = []
    lock = threading.Lock()

    def worker() -> None:
        start.wait(10)
        for _ in range(25):
            task = store.create({"title": "t", **FIELDS}, task_id=None, actor="w")
            with lock:
                ids.append(task.id)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    db.close()
    assert sorted(ids) == [f"TASK-{n:05d}" for n in range(1, 201)]


def test_ids_never_collide_between_processes(settings: Settings) -> None:
    path = settings.kanban_db_url or settings.kanban_db_path
    migrated(settings).close()
    children = [
        subprocess.Popen([sys.executable, "-c", CHILD, str(path), "40"], cwd=REPO, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    try:
        for child in children:
            assert child.stdin is not None
            child.stdin.write("g")
            child.stdin.flush()
        outputs = [child.communicate(timeout=60) for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait(10)
    assert all(child.returncode == 0 for child in children), [err for _, err in outputs]
    ids = [task_id for out, _ in outputs for task_id in out.split()]
    assert sorted(ids) == [f"TASK-{n:05d}" for n in range(1, 121)]


async def test_create_task_defaults_to_todo_with_a_history_entry(kanban: KanbanService) -> None:
    task = await kanban.create_task("Write the parser", "claude-code", "Some *markdown*", actor="lead")
    assert (task.id, task.status, task.description, task.retry_count) == ("TASK-00001", "todo", "Some *markdown*", 0)
    detail = await kanban.get_task(task.id)
    assert [(h.from_status, h.to_status, h.actor) for h in detail.history] == [(None, "todo", "lead")]
    assert detail.created_ms <= detail.updated_ms


async def test_every_status_transition_is_recorded_in_history(kanban: KanbanService) -> None:
    task = await kanban.create_task("Walk the board", "openclaw", status="backlog")
    path = ["todo", "running", "review", "done", "canceled", "waiting", "blocked", "backlog", "running"]
    for who, status in enumerate(path):
        moved = await kanban.move_card(task.id, status, actor=f"agent-{who}")
        assert moved.status == status
    history = (await kanban.get_task(task.id)).history
    pairs = zip(["backlog", *path[:-1]], path, strict=True)
    expected = [(None, "backlog", None)] + [(a, b, f"agent-{who}") for who, (a, b) in enumerate(pairs)]
    assert [(h.from_status, h.to_status, h.actor) for h in history] == expected
    assert [h.at_ms for h in history] == sorted(h.at_ms for h in history)
    assert set(STATUSES) <= {h.to_status for h in history}
    assert (await kanban.get_task(task.id)).retry_count == 1  # back in progress a second time


async def test_moving_to_the_same_status_adds_no_history(kanban: KanbanService) -> None:
    task = await kanban.create_task("Idle", "a")
    await kanban.move_card(task.id, "todo")
    assert len((await kanban.get_task(task.id)).history) == 1


async def test_unknown_status_error_lists_the_valid_ones(kanban: KanbanService) -> None:
    task = await kanban.create_task("x", "a")
    with pytest.raises(InvalidStatus) as caught:
        await kanban.move_card(task.id, "doing-it")
    assert all(status in caught.value.message for status in STATUSES)
    assert caught.value.code == "invalid_status"


async def test_claim_race_between_tasks_has_exactly_one_winner(kanban: KanbanService) -> None:
    task = await kanban.create_task("Claim me", "anyone")
    results = await asyncio.gather(
        *(kanban.move_card(task.id, "running", expected_status="todo", actor=f"agent-{i}") for i in range(6)),
        return_exceptions=True,
    )
    winners = [r for r in results if not isinstance(r, BaseException)]
    losers = [r for r in results if isinstance(r, BaseException)]
    assert len(winners) == 1 and len(losers) == 5
    assert all(isinstance(r, StatusConflict) and r.code == "status_conflict" for r in losers)
    history = (await kanban.get_task(task.id)).history
    assert [(h.from_status, h.to_status) for h in history] == [(None, "todo"), ("todo", "running")]


def test_claim_race_between_threads_has_exactly_one_winner(settings: Settings) -> None:
    db = migrated(settings)
    store = TaskStore(db)
    task_ids = [store.create({"title": f"c{i}", **FIELDS}, task_id=None, actor=None).id for i in range(20)]
    outcomes: dict[str, list[str]] = {task_id: [] for task_id in task_ids}
    start = threading.Barrier(2)

    def claimer(name: str) -> None:
        start.wait(10)
        for task_id in task_ids:
            try:
                store.move(task_id, "running", expected="todo", actor=name)
                outcomes[task_id].append(name)
            except StatusConflict:
                pass

    threads = [threading.Thread(target=claimer, args=(f"agent-{i}",)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    db.close()
    assert all(len(winners) == 1 for winners in outcomes.values())


async def test_notes_are_appended_not_overwritten(kanban: KanbanService) -> None:
    task = await kanban.create_task("Discuss", "a")
    first = await kanban.add_note(task.id, "first thought", author="claude-code")
    second = await kanban.add_note(task.id, "second thought", author="antigravity")
    notes = (await kanban.get_task(task.id)).notes
    assert [(n.author, n.text) for n in notes] == [("claude-code", "first thought"), ("antigravity", "second thought")]
    assert first.id < second.id and first.created_ms <= second.created_ms


async def test_long_form_id_is_accepted_by_get_and_move(kanban: KanbanService) -> None:
    task = await kanban.create_task("Fix login", "a")
    assert (await kanban.get_task("TASK-00001-fix-login")).id == task.id
    assert (await kanban.move_card("TASK-00001-Fix login", "review")).status == "review"


@pytest.mark.parametrize("bad", ["../../x", "/etc/passwd", "TASK-00001/../../x", "TASK-1", "task", ""])
async def test_malformed_task_ids_are_invalid_input(kanban: KanbanService, bad: str) -> None:
    with pytest.raises(InvalidTaskId):
        await kanban.get_task(bad)


async def test_unknown_task_is_not_found(kanban: KanbanService) -> None:
    with pytest.raises(TaskNotFound):
        await kanban.get_task("TASK-00042")


async def test_explicit_task_id_is_kept_and_later_ids_continue_after_it(kanban: KanbanService) -> None:
    assert (await kanban.create_task("old", "a", task_id="TASK-00041-old")).id == "TASK-00041"
    assert (await kanban.create_task("next", "a")).id == "TASK-00042"
    with pytest.raises(TaskExists):
        await kanban.create_task("dup", "a", task_id="TASK-00041")


@pytest.mark.parametrize("title", ["two\nlines", "has [[link", "has ]] end", "   ", "x" * 301])
async def test_titles_that_would_break_the_board_file_are_rejected(kanban: KanbanService, title: str) -> None:
    with pytest.raises(InvalidInput):
        await kanban.create_task(title, "a")


async def test_steps_hold_at_most_four_assignees_with_a_current_step(kanban: KanbanService) -> None:
    task = await kanban.create_task("Relay", "claude-code", steps=["claude-code", "antigravity", "openclaw"])
    assert (task.steps, task.current_step) == (["claude-code", "antigravity", "openclaw"], 1)
    with pytest.raises(InvalidInput):
        await kanban.create_task("Too long", "a", steps=["a", "b", "c", "d", "e"])
    moved = await kanban.update_task(task.id, TaskPatch(current_step=3))
    assert moved.current_step == 3
    with pytest.raises(InvalidInput):
        await kanban.update_task(task.id, TaskPatch(current_step=4))


async def test_update_task_changes_only_the_given_fields(kanban: KanbanService) -> None:
    task = await kanban.create_task("Patch me", "a", "old text", priority="low", tags=["x"])
    patched = await kanban.update_task(task.id, TaskPatch(description="new text", tags=["y", "z"]))
    assert (patched.title, patched.description, patched.priority, patched.tags) == ("Patch me", "new text", "low",
                                                                                  ["y", "z"])
    assert patched.updated_ms >= task.updated_ms


async def test_board_has_every_column_in_order_with_its_cards(kanban: KanbanService) -> None:
    first = await kanban.create_task("one", "claude-code")
    second = await kanban.create_task("two", "openclaw", status="blocked")
    board = await kanban.get_board()
    assert [c.status for c in board.columns] == list(STATUSES)
    cards = {c.status: [(card.id, card.title, card.assignee) for card in c.cards] for c in board.columns}
    assert cards["todo"] == [(first.id, "one", "claude-code")]
    assert cards["blocked"] == [(second.id, "two", "openclaw")]
    assert [t.id for t in await kanban.list_tasks_by_status("blocked")] == [second.id]
    assert [t.id for t in await kanban.list_tasks(assignee="claude-code")] == [first.id]


async def test_data_and_schema_version_survive_a_reopen(settings: Settings) -> None:
    async with KanbanService.open(settings) as service:
        await service.create_task("kept", "a")
    async with KanbanService.open(settings) as service:
        assert [t.title for t in await service.list_tasks()] == ["kept"]
    db = migrated(settings)
    with db.read() as conn:
        version = conn.execute("SELECT version FROM schema_version").fetchone()["version"]
        if settings.kanban_db_url is None:
            assert version == sqlite_db.SCHEMA_VERSION
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        else:
            assert version == postgres.SCHEMA_VERSION
    db.close()


async def test_database_parent_directories_are_created(make_settings, tmp_path: Path) -> None:  # noqa: ANN001
    settings = make_settings(kanban_db=tmp_path / "deep" / "er" / "board.sqlite3")
    async with KanbanService.open(settings) as service:
        await service.create_task("t", "a")
    assert settings.kanban_db_path.is_file()


async def test_delete_task_removes_it_with_its_notes_and_history(kanban: KanbanService) -> None:
    doomed = await kanban.create_task("Doomed", "a")
    kept = await kanban.create_task("Kept", "a")
    await kanban.add_note(doomed.id, "gone with it", author="a")
    deleted = await kanban.delete_task(f"{doomed.id}-Doomed")
    assert deleted.id == doomed.id and deleted.title == "Doomed"
    assert [t.id for t in await kanban.list_tasks()] == [kept.id]
    with pytest.raises(TaskNotFound):
        await kanban.get_task(doomed.id)
    with pytest.raises(TaskNotFound):
        await kanban.delete_task(doomed.id)
    assert (await kanban.create_task("Next", "a")).id == "TASK-00003"  # a deleted id is never handed out again


async def test_change_marker_moves_on_every_commit_by_anyone_and_only_then(kanban: KanbanService,
                                                                          settings: Settings) -> None:
    first = await kanban.change_marker()
    assert await kanban.change_marker() == first
    task = await kanban.create_task("Watched", "a")
    after_create = await kanban.change_marker()
    assert after_create != first
    other = migrated(settings)  # another writer on the same board, as another process would be
    with other.write() as conn:
        conn.execute("UPDATE tasks SET title = 'Renamed elsewhere' WHERE id = ?", (task.id,))
    other.close()
    assert await kanban.change_marker() not in (first, after_create)
