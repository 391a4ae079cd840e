"""Memories that know what replaced them: MemoryService against a real LanceDB table (hash embedder)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from app.memory import supersede
from app.memory.errors import AlreadySuperseded, InvalidId, MemoryNotFound, ScopeForbidden
from app.memory.service import MemoryService

OLD = "timestamps must be milliseconds in every API payload"
NEW = "timestamps are now seconds in every API payload"
CHECKLIST = ("deploy checklist: run the migrations, tag the release, announce it in the team channel, "
             "then watch the error dashboard for an hour")


async def _metadata(service: MemoryService, memory_id: str) -> dict[str, object]:
    """The metadata the table holds for ``memory_id``, once every acknowledged write is flushed into it."""
    await service.writer.flush()
    [row] = service.store.get_rows([memory_id], ["metadata"])
    return dict(json.loads(row["metadata"]))


async def _recalled(service: MemoryService, query: str, top_k: int = 10,
                    include_superseded: bool = False) -> dict[str, str | None]:
    result = await service.recall(query, top_k=top_k, include_superseded=include_superseded)
    return {hit.id: hit.superseded_by for hit in result.hits}


async def test_supersedes_links_both_rows_and_recall_shows_only_the_newer_memory(service: MemoryService) -> None:
    old = await service.remember(OLD, tags=["format"])
    await service.writer.flush()
    vector_before = service.store.get_vector(old.memory_id)
    new = await service.remember(NEW, tags=["format"], supersedes=old.memory_id)
    assert (await _metadata(service, new.memory_id))["supersedes"] == old.memory_id
    assert (await _metadata(service, old.memory_id))["superseded_by"] == new.memory_id
    assert (await _metadata(service, old.memory_id))["tags"] == ["format"]  # the rest of its metadata is kept
    assert np.array_equal(service.store.get_vector(old.memory_id), vector_before)  # a metadata-only update
    assert await _recalled(service, "timestamps API payload") == {new.memory_id: None}
    everything = await _recalled(service, "timestamps API payload", include_superseded=True)
    assert everything == {new.memory_id: None, old.memory_id: new.memory_id}
    listed = {m.id: (m.supersedes, m.superseded_by) for m in await service.list_facts()}
    assert listed == {new.memory_id: (old.memory_id, None), old.memory_id: (None, new.memory_id)}
    assert service.store.count() == 2  # nothing is deleted (flushed by ``_metadata`` above)


async def test_keyword_search_hides_superseded_memories_unless_asked(service: MemoryService) -> None:
    old = await service.remember(OLD)
    new = await service.remember(NEW, supersedes=old.memory_id)
    assert [hit.id for hit in await service.keyword_search("timestamps")] == [new.memory_id]
    shown = await service.keyword_search("timestamps", include_superseded=True)
    assert {hit.id: hit.superseded_by for hit in shown} == {new.memory_id: None, old.memory_id: new.memory_id}


async def test_recall_fills_top_k_with_current_memories_past_superseded_ones(service: MemoryService) -> None:
    current = []
    for i in range(4):
        old = await service.remember(f"the build server is host-{i} in rack {i}")
        current.append((await service.remember(f"the build server moved to host-{i}b", supersedes=old.memory_id))
                       .memory_id)
    result = await service.recall("the build server is host in rack", top_k=4)
    assert sorted(hit.id for hit in result.hits) == sorted(current)


async def test_superseding_an_unknown_memory_is_not_found_and_writes_nothing(service: MemoryService) -> None:
    with pytest.raises(MemoryNotFound):
        await service.remember(NEW, supersedes="nosuchid")
    with pytest.raises(InvalidId):
        await service.remember(NEW, supersedes="not an id!")
    await service.writer.flush()
    assert service.store.count() == 0


async def test_superseding_needs_the_right_to_write_the_old_memorys_scope(service: MemoryService) -> None:
    theirs = await service.remember(OLD, agent="beta")
    with pytest.raises(ScopeForbidden):
        await service.remember(NEW, agent="alpha", caller="alpha", supersedes=theirs.memory_id)
    assert "superseded_by" not in await _metadata(service, theirs.memory_id) and service.store.count() == 1
    own = await service.remember(OLD, agent="alpha", caller="alpha")
    new = await service.remember(NEW, agent="alpha", caller="alpha", supersedes=own.memory_id)
    assert (await service.get(own.memory_id)).superseded_by == new.memory_id


async def test_a_superseded_memory_cannot_be_superseded_again(service: MemoryService) -> None:
    old = await service.remember(OLD)
    new = await service.remember(NEW, supersedes=old.memory_id)
    with pytest.raises(AlreadySuperseded) as raised:
        await service.remember("timestamps are microseconds", supersedes=old.memory_id)
    assert raised.value.code == "already_superseded" and new.memory_id in str(raised.value)
    await service.writer.flush()
    assert service.store.count() == 2
    newest = await service.remember("timestamps are microseconds", supersedes=new.memory_id)
    assert (await service.get(new.memory_id)).superseded_by == newest.memory_id


async def test_forgetting_the_replacement_brings_the_old_memory_back(service: MemoryService) -> None:
    old = await service.remember(OLD)
    new = await service.remember(NEW, supersedes=old.memory_id)
    await service.forget(new.memory_id)
    assert await _recalled(service, "timestamps API payload") == {old.memory_id: None}
    assert (await service.get(old.memory_id)).superseded_by is None
    again = await service.remember(NEW, supersedes=old.memory_id)  # the dangling link is no link
    assert (await service.get(old.memory_id)).superseded_by == again.memory_id


async def test_a_crash_between_the_two_writes_leaves_a_one_sided_link_that_recall_still_honours(
    service: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def crash(*args: object) -> None:
        raise RuntimeError("process killed before the second write")

    old = await service.remember(OLD)
    monkeypatch.setattr(supersede, "mark_replaced", crash)
    with pytest.raises(RuntimeError):
        await service.remember(NEW, supersedes=old.memory_id)
    [new] = [m for m in await service.list_facts() if m.id != old.memory_id]
    # The new row was written first and carries its half; the old row was not marked.
    assert new.supersedes == old.memory_id and "superseded_by" not in await _metadata(service, old.memory_id)
    # Found together, the new one's claim hides the old one; found alone, the old one is current.
    assert await _recalled(service, "timestamps API payload") == {new.id: None}
    assert await _recalled(service, "milliseconds", top_k=1) == {old.memory_id: None}


async def test_a_near_duplicate_saying_something_else_suggests_superseding_it(service: MemoryService) -> None:
    first = await service.remember(CHECKLIST)
    changed = await service.remember(CHECKLIST.replace("an hour", "two hours"))
    assert changed.duplicate is not None and changed.duplicate.memory_id == first.memory_id
    assert changed.duplicate.hint == f"if this replaces {first.memory_id}, remember with supersedes={first.memory_id}"
    repeat = await service.remember(CHECKLIST)
    assert repeat.duplicate is not None and repeat.duplicate.hint is None  # the same words: nothing replaced
    check = await service.check_duplicate(CHECKLIST.replace("an hour", "a day"))
    assert check.is_duplicate and check.hint is not None and "supersedes=" in check.hint


async def test_no_hint_once_the_near_duplicate_is_linked(service: MemoryService) -> None:
    first = await service.remember(CHECKLIST)
    linked = await service.remember(CHECKLIST.replace("an hour", "two hours"), supersedes=first.memory_id)
    assert linked.duplicate is not None and linked.duplicate.memory_id == first.memory_id
    assert linked.duplicate.hint is None
    check = await service.check_duplicate(CHECKLIST.replace("an hour", "two hours") + " today")
    assert check.similar and check.hint == f"if this replaces {linked.memory_id}, remember with " \
        f"supersedes={linked.memory_id}"
