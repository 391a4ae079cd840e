"""The glibc heap helpers, in a fresh process (this machine runs glibc)."""

from __future__ import annotations

import subprocess
import sys


def test_freed_memory_is_returned_to_the_os_after_a_large_transient() -> None:
    script = """
import psutil
from app.memory import heap
assert heap.limit_arenas()
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

