"""Waiting for the vector cache to read another process's commits (reads never wait for them).

A read answers at the cache's version and starts a background catch-up when the table moved; so does the
journal's poller, a few times a second. A catch-up the poller started just before the commit under test may
end without it, so these wait until the cache holds the version the table had when they were called.
"""

from __future__ import annotations

import asyncio
import time

from app.memory.store.table import Store


def caught_up(store: Store, timeout_s: float = 30.0) -> bool:
    """Block until the cache holds the table's current version (read in the background); False on timeout."""
    cache, sync = store.cache, store.sync
    assert cache is not None and sync is not None, "a store with a vector cache"  # noqa: S101
    target = store.probe.current()
    deadline = time.monotonic() + timeout_s
    store.read_at()  # what a read does: starts the background catch-up unless one is running
    while True:
        if not sync.wait_idle(max(0.0, deadline - time.monotonic())):
            return False
        if cache.version is not None and cache.version >= target:
            return True
        if time.monotonic() >= deadline:
            return False
        sync.start_background()  # the catch-up that ran had started before the commit


async def caught_up_async(store: Store, timeout_s: float = 30.0) -> bool:
    """``caught_up`` off the event loop (the service's poller and flusher keep running)."""
    return await asyncio.to_thread(caught_up, store, timeout_s)
