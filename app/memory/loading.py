"""What the memory service loads after its table is open, and how far it got: the model, the vector cache.

The server answers before these loads end (app/startup.py): remember waits for the model within its
deadline, recall uses keyword search until the model is there, and searches use LanceDB until the
vector cache is (about a second at 100k rows; docs/performance.md, 'Start-up').
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import threading
import time
from typing import TYPE_CHECKING

from app.memory.embedding_calls import EmbeddingCalls
from app.memory.embeddings import Embedder, EmbeddingError

if TYPE_CHECKING:
    from app.memory.journal.writer import JournalWriter
    from app.memory.store import Store

#: How long ``wait`` waits for the first vector-cache load before it reports it as not finished.
CACHE_LOAD_WAIT_S = 600.0


class BackgroundLoads:
    """The model's load (``EmbeddingCalls``) and the first load of the store's vector cache."""

    def __init__(self, embedding: EmbeddingCalls, store: Store) -> None:
        self.embedding = embedding
        self.store = store
        self._opened_at = time.perf_counter()
        self.cache_seconds: float | None = None  # from the store's opening to its cache's first load
        self._cache_waited = False  # the first load ended (a failed one is retried by a later search)

    async def wait(self) -> None:
        """Return once both loads have ended, loaded or failed."""
        await self.embedding.wait_loaded()
        sync = self.store.sync
        if sync is not None and not self._cache_waited:
            await asyncio.to_thread(sync.wait_loaded, CACHE_LOAD_WAIT_S)
            if self.store.cache is not None and self.store.cache.version is not None:
                self.cache_seconds = time.perf_counter() - self._opened_at
            self._cache_waited = True

    def pending(self) -> list[str]:
        """The loads still under way, by name (what ``/readyz`` lists)."""
        cache = self.store.cache
        cache_loading = cache is not None and cache.version is None and not self._cache_waited
        return [name for name, busy in (("model", self.embedding.loading), ("vector_cache", cache_loading)) if busy]

    def times(self) -> dict[str, float | None]:
        """Seconds each load took (None: failed or not finished)."""
        return {"model": self.embedding.load_seconds, "vector cache": self.cache_seconds}


def dimension_known(embedder: Embedder) -> bool:
    """Whether the table's schema can be built before the model loads (a remote provider may ask first)."""
    try:
        return embedder.dimension > 0
    except EmbeddingError:
        return False


def store_classes() -> tuple[type[Store], type[JournalWriter]]:
    """``Store`` and ``JournalWriter``, imported on first use: they import LanceDB, about two seconds."""
    defer_package_init(NAMESPACE_CLIENT)
    from app.memory.journal.writer import JournalWriter
    from app.memory.store import Store

    return Store, JournalWriter


#: The generated client of LanceDB's REST namespace. ``import lancedb`` needs only its ``models``, but
#: importing those runs the package's ``__init__``, which also imports every API module: most of the
#: import's time (pydantic checks each API method's signature) for a client only a remote namespace uses
#: (docs/performance.md, 'Start-up').
NAMESPACE_CLIENT = "lance_namespace_urllib3_client"


def defer_package_init(name: str) -> None:
    """Put package ``name`` in ``sys.modules`` with its ``__init__`` not yet run, to run on first use.

    The module is the real one, found as ``import`` finds it, with its real ``__path__``: its submodules
    import as usual (LanceDB's ``from <name>.models import ...`` loads the models alone), also when looked
    up as attributes (``from <name> import rest`` inside the package). Any other name looked up on the
    package runs its ``__init__`` in place, so whoever uses the package gets all of it. A no-op when the
    package is imported already or not installed.
    """
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        return
    module = importlib.util.module_from_spec(spec)
    loader = spec.loader
    lock = threading.Lock()

    def run_init_on_first_use(attribute: str) -> object:
        if not attribute.startswith("__") and importlib.util.find_spec(f"{name}.{attribute}") is not None:
            return importlib.import_module(f"{name}.{attribute}")  # a submodule: itself, as import would
        with lock:
            if module.__dict__.pop("__getattr__", None) is not None:
                loader.exec_module(module)
        return getattr(module, attribute)

    module.__getattr__ = run_init_on_first_use  # type: ignore[method-assign]
    sys.modules[name] = module
