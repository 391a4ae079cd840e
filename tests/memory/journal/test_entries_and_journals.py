"""The journal's pieces: folding entries per id, and both backends (a SQLite file, a real PostgreSQL)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from app.memory.errors import JournalUnavailable
from app.memory.journal.base import Journal, Marker
from app.memory.journal.entries import Entry, fold, patch_groups
from app.memory.journal.postgres_journal import FlushLease, PostgresJournal
from app.memory.journal.sqlite_journal import FileLease, SqliteJournal


def row(memory_id: str, text: str = "t", **extra: object) -> dict[str, object]:
    return {"id": memory_id, "text": text, "scope": "global", "vector": np.arange(4, dtype=np.float32), **extra}


def test_fold_keeps_the_net_effect_per_id_in_journal_order() -> None:
    entries = [
        Entry("add", "a", row("a", "first")),
        Entry("patch", "a", row("a", "first, edited"), ("text",)),  # part of the add
        Entry("patch", "b", row("b", importance=0.2), ("importance",)),
        Entry("patch", "b", row("b", "b text", importance=0.2), ("text",)),  # joins the earlier patch
        Entry("add", "c", row("c")),
        Entry("delete", "c"),  # wins over the add: an interrupted flush may have committed it
        Entry("patch", "d", row("d"), ("text",)),
        Entry("delete", "d"),
    ]
    plan = fold(entries)
    assert plan.adds == {"a": entries[1].row}
    assert plan.patches == {"b": {"importance": 0.2, "text": "b text"}}
    assert plan.deletes == ["c", "d"]


def test_patches_are_grouped_by_the_columns_they_change() -> None:
    groups = dict(patch_groups({"x": {"text": "1"}, "y": {"importance": 0.1}, "z": {"text": "2"}}))
    assert groups == {("text",): [{"id": "x", "text": "1"}, {"id": "z", "text": "2"}],
                      ("importance",): [{"id": "y", "importance": 0.1}]}


@pytest.fixture(params=["sqlite", "postgres"])
def journal(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Journal]:
    if request.param == "sqlite":
        opened: Journal = SqliteJournal(tmp_path / "journal.sqlite3", "memories")
    else:
        opened = PostgresJournal(request.getfixturevalue("postgres_url"), "s3://bucket/team/memories")
    yield opened
    opened.close()


def test_entries_come_back_in_order_with_their_rows_and_vectors(journal: Journal) -> None:
    written = journal.append([Entry("add", "a", row("a", "café ☕")), Entry("delete", "b")])
    written += journal.append([Entry("patch", "a", row("a", "edited"), ("text",))])
    assert [e.seq for e in written] == sorted(e.seq for e in written) and len({e.seq for e in written}) == 3
    back = journal.read_after(0, 100)
    assert [(e.op, e.id, e.columns) for e in back] == [("add", "a", ()), ("delete", "b", ()), ("patch", "a", ("text",))]
    assert back[0].row is not None and back[0].row["text"] == "café ☕"
    assert np.array_equal(back[0].row["vector"], np.arange(4, dtype=np.float32))
    assert back[1].row is None
    assert [e.seq for e in journal.read_after(written[1].seq, 100)] == [back[2].seq]


def test_a_flush_marker_says_how_far_the_table_holds_the_journal(journal: Journal) -> None:
    written = journal.append([Entry("add", str(i), row(str(i))) for i in range(5)])
    assert journal.flushed() == Marker(0, 0) and journal.depth().rows == 5
    journal.mark_flushed(Marker(written[2].seq, 7))
    assert journal.flushed() == Marker(written[2].seq, 7)
    assert journal.depth().rows == 2 and journal.depth().oldest_ms == written[3].created_ms
    assert journal.markers_after(0) == [Marker(written[2].seq, 7)]
    journal.mark_flushed(Marker(written[4].seq, 9))
    assert journal.rewind(8) == Marker(written[2].seq, 7)  # the table went back to version 8
    assert journal.depth().rows == 2


def test_purge_drops_only_flushed_entries_older_than_asked(journal: Journal) -> None:
    written = journal.append([Entry("add", str(i), row(str(i))) for i in range(4)])
    journal.mark_flushed(Marker(written[1].seq, 3))
    assert journal.purge(written[0].created_ms) == 0  # none older than that
    assert journal.purge(written[-1].created_ms + 1) == 2  # the two flushed ones
    assert [e.id for e in journal.read_after(0, 10)] == ["2", "3"]
    assert journal.flushed() == Marker(written[1].seq, 3)  # the newest marker stays


def test_concurrent_appends_get_distinct_ordered_sequence_numbers(journal: Journal) -> None:
    seqs: list[int] = []
    lock = threading.Lock()

    def appender(n: int) -> None:
        for i in range(20):
            [entry] = journal.append([Entry("add", f"{n}-{i}", row(f"{n}-{i}"))])
            with lock:
                seqs.append(entry.seq)

    threads = [threading.Thread(target=appender, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(seqs)) == 160
    assert [e.seq for e in journal.read_after(0, 1000)] == sorted(seqs)


def test_two_journals_on_one_sqlite_file_share_it(tmp_path: Path) -> None:
    first, second = SqliteJournal(tmp_path / "j.sqlite3", "memories"), SqliteJournal(tmp_path / "j.sqlite3", "memories")
    other_table = SqliteJournal(tmp_path / "j.sqlite3", "notes")
    try:
        first.append([Entry("add", "a", row("a"))])
        second.append([Entry("add", "b", row("b"))])
        other_table.append([Entry("add", "c", row("c"))])
        assert [e.id for e in first.read_after(0, 10)] == [e.id for e in second.read_after(0, 10)] == ["a", "b"]
    finally:
        for journal in (first, second, other_table):
            journal.close()


def test_a_full_disk_refuses_the_append_and_writes_nothing(tmp_path: Path) -> None:
    journal = SqliteJournal(tmp_path / "j.sqlite3", "memories")
    try:
        journal.append([Entry("add", "before", row("before"))])
        pages = journal._db.execute("PRAGMA page_count").fetchone()[0]
        journal._db.execute(f"PRAGMA max_page_count = {pages}")  # SQLite's own "database or disk is full"
        with pytest.raises(JournalUnavailable) as refused:
            journal.append([Entry("add", "big", row("big", "x" * 200_000))])
        assert "nothing was written" in refused.value.message and refused.value.retry_after_s
        assert [e.id for e in journal.read_after(0, 10)] == ["before"]
    finally:
        journal.close()


def test_a_journal_database_that_does_not_answer_is_unavailable_at_once() -> None:
    from tests.support.server import free_port

    with pytest.raises(JournalUnavailable, match="does not answer"):
        PostgresJournal(f"postgresql://postgres@127.0.0.1:{free_port()}/nowhere", "t")


def test_one_flush_lease_holder_at_a_time_and_it_passes_on_when_the_holder_goes(postgres_url: str,
                                                                                tmp_path: Path) -> None:
    first, second = FlushLease(postgres_url, "team/memories"), FlushLease(postgres_url, "team/memories")
    assert first.held() and first.held() and not second.held()
    first.close()  # its session ends, as when the process dies; PostgreSQL frees the lock as the backend exits
    deadline = time.monotonic() + 10
    while not second.held():
        assert time.monotonic() < deadline, "the lease never passed on"
        time.sleep(0.02)  # the next try of the flusher's loop, shortened
    second.close()
    mine, theirs = FileLease(tmp_path / "j.sqlite3"), FileLease(tmp_path / "j.sqlite3")
    assert mine.held() and not theirs.held()
    mine.close()
    assert theirs.held()
    theirs.close()
