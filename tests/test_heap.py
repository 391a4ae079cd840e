"""The glibc heap helpers, in a fresh process (this machine runs glibc)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading

import pytest

from app import heap


def test_freed_memory_is_returned_to_the_os_after_a_large_transient() -> None:
    script = """
import psutil
from app import heap
assert heap.tune_allocators()
import pyarrow as pa
assert pa.default_memory_pool().backend_name == "system"
process = psutil.Process()
before = process.memory_info().rss
blocks = [bytearray(64 * 1024) for _ in range(3000)]  # ~190 MB of small heap allocations (below mmap size)
peak = process.memory_info().rss
del blocks[:-1]  # the last block keeps the heap top in use, so free() alone cannot shrink it
assert heap.release_free_memory()
after = process.memory_info().rss
print(before, peak, after)
assert peak - before > 150 * 2**20, (before, peak)
assert after - before < 40 * 2**20, (before, peak, after)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr



async def test_the_periodic_trim_runs_until_its_block_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = 0
    third = threading.Event()  # set from the trim's worker thread

    def counted() -> bool:
        nonlocal calls
        calls += 1
        if calls == 3:
            third.set()
        return True

    monkeypatch.setattr(heap, "release_free_memory", counted)
    async with heap.trimmed_periodically(0.001):
        assert await asyncio.to_thread(third.wait, 10)
    stopped_at = calls
    for _ in range(20):
        await asyncio.sleep(0)  # yield to the loop: a task left running would trim again
    assert calls == stopped_at >= 3
