"""The two programs' write locks exclude each other. memory-mcp acknowledges a write once its journal holds it;
its flush into the table waits for the plugin's lock, and the plugin's write waits for memory-mcp's."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from app.memory.store.locks import WriteLock
from interop.conftest import DIM, PluginFactory, Rest, ServerFactory, doc_vector, wait_for
from interop.plugin import PluginDriver

HOLD_MS = 3000


def _now_ms() -> int:
    return int(time.time() * 1000)


# The plugin creates the table in both tests, so they ask only about the locks (test_one_table covers a
# table memory-mcp created).


def test_memory_mcp_acknowledges_at_once_and_commits_only_after_the_plugin_released_its_lock(
    db_path: Path, make_plugin: PluginFactory, serve: ServerFactory
) -> None:
    plugin = make_plugin()
    plugin.init(db_path, DIM)
    plugin.store("the plugin wrote once, so its lock target exists", doc_vector("the plugin wrote once"))

    with serve() as rest:
        rest.remember("written before the plugin took its lock")
        rest.in_table()
        held = plugin.hold_lock(HOLD_MS)
        started = _now_ms()
        memory_id = rest.remember("written while the plugin held its lock")
        acknowledged_at = _now_ms()
        in_table_while_held = plugin.get(memory_id)
        released_at = int(held.done.result(60)["releasedAt"])
        assert acknowledged_at < released_at and acknowledged_at - started < HOLD_MS / 3  # not held up by the lock
        assert in_table_while_held is None  # the flush waited for the lock
        wait_for(lambda: plugin.get(memory_id) is not None, timeout=10, what="the flush after the lock's release")
        assert rest.stats()["total"] == 3


def test_plugin_write_waits_for_memory_mcps_lock_then_succeeds(
    db_path: Path, make_plugin: PluginFactory, serve: ServerFactory
) -> None:
    plugin = make_plugin()
    plugin.init(db_path, DIM)
    with serve() as rest:
        rest.remember("memory-mcp wrote once")
        _plugin_waits_for(rest, plugin, db_path)


def _plugin_waits_for(rest: Rest, plugin: PluginDriver, db_path: Path) -> None:

    locked, release = threading.Event(), threading.Event()
    released_at: list[int] = []

    def hold() -> None:
        with WriteLock(db_path, timeout_s=30).hold():
            locked.set()
            release.wait(60)
            released_at.append(_now_ms())

    holder = threading.Thread(target=hold, name="memory-mcp-lock-holder")
    holder.start()
    try:
        assert locked.wait(30), "memory-mcp's lock was not taken"
        text = "written by the plugin while memory-mcp held its lock"
        _, write = plugin.submit("timedStore", entry={"text": text, "vector": doc_vector(text), "category": "fact",
                                                      "scope": "global", "importance": 0.5})
        held_for = threading.Event()
        held_for.wait(HOLD_MS / 1000)  # the scenario: memory-mcp keeps its lock this long
    finally:
        release.set()
        holder.join(60)
    answer = write.result(120)
    assert answer["finishedAt"] >= released_at[0], (
        f"the plugin committed {released_at[0] - answer['finishedAt']} ms inside memory-mcp's lock"
    )
    # memory-mcp reads another writer's commit in the background, without making a read wait for it.
    wait_for(lambda: rest.get(answer["entry"]["id"]).status_code == 200, what="memory-mcp sees the plugin's row")
