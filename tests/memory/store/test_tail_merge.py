"""Merging the newest fragments: fewer fragments, the same rows, and other writers' changes kept."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import anyio
import lancedb
import numpy as np
import pytest

from app.memory.journal import flusher as flusher_module
from app.memory.service import MemoryService
from app.memory.store.table import Store
from tests.conftest import SettingsFactory


def _fragments(store: Store) -> int:
    return int(store.table.stats()["fragment_stats"]["num_fragments"])


def _rows(store: Store) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = store.table.to_arrow().sort_by("id").to_pylist()
    return rows


async def test_a_tail_merge_leaves_one_fragment_for_the_tail_and_the_same_rows(make_settings: SettingsFactory) -> None:
    async with MemoryService.open(make_settings(compact_every_commits=1000)) as service:
        for i in range(12):
            await service.remember(f"tail memory number {i} about topic {i * 7}")
            await service.writer.flush()  # one commit, one fragment each
        store = service.store
        before_rows, before_fragments = _rows(store), _fragments(store)
        merged = await asyncio.to_thread(store.merge_tail, 12)
        assert merged == 12
        assert before_fragments == 12 and _fragments(store) == 1
        assert _rows(store) == before_rows  # vectors included, bit for bit
        assert store.cache is not None and store.cache.version == store.version()  # no reload needed
        hits = await service.recall("tail memory number 5 about topic 35", top_k=1)
        assert hits.hits[0].text == "tail memory number 5 about topic 35"


async def test_a_row_another_writer_changes_while_the_tail_is_merged_keeps_that_change(
        make_settings: SettingsFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with MemoryService.open(make_settings(compact_every_commits=1000)) as service:
        ids = [(await service.remember(f"shared memory {i}")).memory_id for i in range(4)]
        await service.writer.flush()
        store = service.store
        other = lancedb.connect(str(tmp_path / "lancedb")).open_table("memories")
        read_tail = store.table.take_offsets

        def take_then_race(offsets: list[int]) -> Any:
            taken = read_tail(offsets).to_arrow()
            # Another process (no lock) changes one row's text and another's vector after the read.
            other.update(where=f"id = '{ids[1]}'", values={"text": "edited elsewhere"})
            other.update(where=f"id = '{ids[2]}'", values={"vector": np.full(store.cache.dimension, 0.5).tolist()})

            class Taken:
                def to_arrow(self) -> Any:
                    return taken
            return Taken()

        monkeypatch.setattr(store.table, "take_offsets", take_then_race)
        await asyncio.to_thread(store.merge_tail, 4)
        rows = {row["id"]: row for row in _rows(store)}
    assert rows[ids[1]]["text"] == "edited elsewhere"
    assert rows[ids[2]]["vector"] == pytest.approx([0.5] * len(rows[ids[2]]["vector"]))
    assert rows[ids[0]]["text"] == "shared memory 0" and len(rows) == 4


async def test_the_writer_merges_the_tail_every_few_commits_between_compactions(
        make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flusher_module, "TAIL_MERGE_COMMITS", 4)
    async with MemoryService.open(make_settings(compact_every_commits=1000, flush_interval_s=0.01)) as service:
        for i in range(10):
            await service.remember(f"sequential memory {i}")
            await service.writer.flush()
            # Merges run in their own thread, and a request made before the last one ran joins it.
            assert await service.writer.housekeeping_idle()
        assert service.writer.tail_merges == 2 and service.writer.compactions == 0
        assert _fragments(service.store) <= 4  # 10 commits: 2 merged tails + 2 new fragments
        assert service.store.count() == 10
        assert len(await service.list_memories(limit=50)) == 10


async def test_quiet_spells_merge_the_tail_instead_of_rewriting_the_table(
        make_settings: SettingsFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Agents write a few memories, then nothing for minutes: each quiet spell must cost a tail merge,
    not a compaction (a rewrite of every row), and must not prune the versions readers may hold."""
    monkeypatch.setattr(flusher_module, "IDLE_MERGE_S", 0.05)
    async with MemoryService.open(make_settings(compact_every_commits=1000)) as service:
        writer = service.writer
        merged = asyncio.Event()
        merge = writer.flusher._merge_tail

        def merge_then_tell() -> None:
            merge()
            merged.set()

        monkeypatch.setattr(writer.flusher, "_merge_tail", merge_then_tell)
        versions_before_spells = []
        for spell in range(3):
            versions_before_spells.append(service.store.version())
            for i in range(3):
                await service.remember(f"spell {spell}, memory {i}")
                await writer.flush()  # three commits, three fragments
            with anyio.fail_after(30):
                await merged.wait()  # the flusher went quiet and merged the spell's three fragments
            assert await writer.housekeeping_idle()  # the merge runs in its own thread
            merged.clear()
        assert (writer.tail_merges, writer.compactions) == (3, 0)
        assert _fragments(service.store) == 3
        assert service.store.count() == 9
        reader = lancedb.connect(str(tmp_path / "lancedb")).open_table("memories")
        for spell, version in enumerate(versions_before_spells):
            reader.checkout(version)  # every version a reader could have been on is still whole
            assert reader.count_rows() == 3 * spell and len(reader.to_arrow()) == 3 * spell


def _id_indices(store: Store) -> list[Any]:
    return [config for config in store.table.list_indices() if list(config.columns) == ["id"]]


async def test_the_table_gets_one_id_index_which_compaction_keeps_covering_every_row(
        make_settings: SettingsFactory) -> None:
    settings = make_settings(compact_every_commits=1000)
    async with MemoryService.open(settings) as service:
        ids = [(await service.remember(f"indexed memory {i}")).memory_id for i in range(6)]
        await service.writer.flush()
        store = service.store
        assert _id_indices(store) == []  # opening and appending add no index: the first merge does
        await asyncio.to_thread(store.merge_tail, 6)
        assert len(_id_indices(store)) == 1
        await asyncio.to_thread(store.optimize)
        stats = store.table.index_stats(_id_indices(store)[0].name)
        assert stats is not None and (stats.num_indexed_rows, stats.num_unindexed_rows) == (6, 0)
        assert [row["id"] for row in store.get_rows([ids[3]], ["id"])] == [ids[3]]
        await service.forget(ids[4])
        await service.writer.flush()
        version = store.version()
    async with MemoryService.open(settings) as service:  # reopening builds no second index
        assert len(_id_indices(service.store)) == 1 and service.store.version() == version
        assert sorted(row["id"] for row in service.store.get_rows(ids, ["id"])) == sorted(ids[:4] + ids[5:])


async def test_a_table_without_an_id_index_still_merges_its_tail_when_building_one_fails(
        make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    def refuse(*_: Any, **__: Any) -> None:
        raise OSError("read-only index directory")

    monkeypatch.setattr(lancedb.table.LanceTable, "create_index", refuse)
    async with MemoryService.open(make_settings(compact_every_commits=1000)) as service:
        for i in range(5):
            await service.remember(f"unindexed memory {i}")
            await service.writer.flush()
        store = service.store
        before = _rows(store)
        assert await asyncio.to_thread(store.merge_tail, 5) == 5
        assert _id_indices(store) == [] and "could not index the id column" in caplog.text
        assert _fragments(store) == 1 and _rows(store) == before
