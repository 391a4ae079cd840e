"""Keep the cyclic garbage collector from stopping the server for a tenth of a second at a time.

Why: a full collection walks every object the collector tracks, and after start-up that is ~190k
objects (the modules of FastAPI, pydantic, the MCP SDK, LanceDB). On this machine one walk took
120-135 ms, holding the GIL, so every request in flight waited. Under 32 remember clients at 100k
rows a full collection ran every ~1.5 s; the quarter-seconds with one had half the throughput of the
others (250 against 500-600 writes/s) and 200 ms requests. What is alive once the server is ready
lives as long as the server, so it is moved out of the collector's sight (``gc.freeze``); everything
allocated later is still collected.
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
