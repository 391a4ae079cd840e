"""Keep the C heap from holding on to memory the process no longer uses (glibc only; no-op elsewhere).

Why: a vector-cache reload decodes the table in LanceDB's worker threads, and glibc gives every
thread that allocates at once an arena of its own and keeps freed pages inside it, so the process
stays far larger than what it holds. Trimming, fewer arenas and Arrow on malloc give those pages
back (docs/performance.md, 'Heap arenas and trimming').
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import logging
from collections.abc import AsyncIterator
from functools import cache

import pyarrow as pa

logger = logging.getLogger(__name__)

M_ARENA_MAX = -8  # from glibc's malloc.h
ARENAS = 2
# A trim costs a few milliseconds, so every few seconds keeps the transients of recalls and writes
# from piling up at a negligible share of a core (docs/performance.md, 'Heap arenas and trimming').
TRIM_EVERY_S = 3.0


@cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.malloc_trim  # noqa: B018 - musl and macOS have no malloc_trim: treat as "not glibc"
        libc.mallopt  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


def tune_allocators(arenas: int = ARENAS) -> bool:
    """Route Arrow through malloc and cap glibc's malloc arenas (call early, before the worker
    threads start); True if the arena cap was applied.

    Arrow's default pool (mimalloc) keeps the pages of freed buffers for reuse, so every vector-cache
    search left a few MB more resident; on malloc they are returned by ``release_free_memory`` like
    everything else (docs/performance.md, 'Heap arenas and trimming').
    """
    pa.set_memory_pool(pa.system_memory_pool())
    libc = _libc()
    # Not fixed mmap/trim thresholds: they made every search give its pages back and fault them in
    # again, which more than doubled a vector-cache search (docs/performance.md, 'Heap arenas and trimming').
    return bool(libc is not None and libc.mallopt(M_ARENA_MAX, arenas))


def release_free_memory() -> bool:
    """Return freed heap pages to the OS (after a large transient allocation); True if any were."""
    libc = _libc()
    return bool(libc is not None and libc.malloc_trim(0))


@contextlib.asynccontextmanager
async def trimmed_periodically(interval_s: float = TRIM_EVERY_S) -> AsyncIterator[None]:
    """Run ``release_free_memory`` every ``interval_s`` in a worker thread while the block runs."""

    async def trim_forever() -> None:
        while True:
            await asyncio.sleep(interval_s)
            await asyncio.to_thread(release_free_memory)

    task = asyncio.create_task(trim_forever(), name="heap-trim")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
