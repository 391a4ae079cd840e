"""Keep the cyclic garbage collector from stopping the server for a tenth of a second at a time.

Why: a full collection walks every object the collector tracks, and after start-up that is a great
many (the modules of FastAPI, pydantic, the MCP SDK, LanceDB). One walk holds the GIL for over a tenth
of a second, so every request in flight waits, and under sustained writes full collections came often
enough to halve throughput while they ran (docs/performance.md, 'Garbage-collector pauses'). What is
alive once the server is ready lives as long as the server, so it is moved out of the collector's
sight (``gc.freeze``); everything allocated later is still collected.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def startup_objects_frozen() -> Iterator[None]:
    """Collect once, then exempt every surviving object from later collections until the block ends."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()  # back in the oldest generation: collectable again once the server is done
