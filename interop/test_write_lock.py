"""The two programs' write locks exclude each other: a write waits for the other's lock, then succeeds."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from app.memory.store.locks import WriteLock
from interop.conftest import DIM, PluginFactory, Rest, ServerFactory, doc_vector
from interop.plugin import PluginDriver

HOLD_MS = 3000


def _now_ms() -> int:
    return int(time.time() * 1000)


# The plugin creates the table in both tests, so they ask only about the locks (test_one_table covers a
# table memory-mcp created).


def test_memory_mcp_write_waits_for_the_plugins_lock_then_succeeds(
    db_path: Path, make_plugin: PluginFactory, serve: ServerFactory
) -> None:
    plugin = make_plugin()
    plugin.init(db_path, DIM)
    plugin.store("the plugin wrote once, so its lock target exists", doc_vector("the plugin wrote once"))

    with serve() as rest:
        rest.remember("written before the plugin took its lock")
        held = plugin.hold_lock(HOLD_MS)
        with ThreadPoolExecutor(1) as pool:
            write = pool.submit(lambda: (rest.remember("written while the plugin held its lock"), _now_ms()))
            released_at = int(held.done.result(60)["releasedAt"])
            memory_id, finished_at = write.result(120)
        assert finished_at >= released_at, (
            f"memory-mcp committed {released_at - finished_at} ms inside the plugin's lock"
        )
        assert plugin.get(memory_id) is not None
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
    assert rest.get(answer["entry"]["id"]).status_code == 200
