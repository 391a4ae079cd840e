"""Blocking access to the LanceDB table; every method runs in a worker thread, never on the loop.

Search uses the cosine metric everywhere, so ``score = 1 - _distance`` is the cosine similarity of
unit vectors (1.0 = identical). Filters are pre-filters (LanceDB's default): a post-filter applied
after the top-k would silently drop matches.

With ``settings.vector_cache`` (the default) an in-memory copy of the vectors (``VectorCache``)
answers searches with no filter or one scope, exactly, through one batching thread
(``SearchBatcher``). Every commit of ours tells the cache the table versions around it, under the
write lock. Reads answer at the cache's version and never wait: a table that moved without us (another
process wrote) is read into the cache by a background thread (``cache_sync``).

Writes come from the journal's flusher (``app/memory/journal``): ``locked`` runs its work under the
write lock, and the ``*_held`` commits inside it each tell the cache.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import lancedb
import numpy as np
import pyarrow as pa

from app.memory.embeddings.base import Embedder
from app.memory.index import SearchBatcher, VectorCache, with_cosines
from app.memory.store import cache_sync, connection, filters, retention, table_format
from app.memory.store.cache_sync import CacheSync
from app.memory.store.locks import CommitLock
from app.memory.store.schema import ROW_COLUMNS, build_schema, check_compatible
from app.memory.store.version_probe import VersionProbe
from app.memory.store.writes import TableWrites
from app.settings import Settings

logger = logging.getLogger(__name__)

T = TypeVar("T")
# LanceDB's caches are unbounded by default, and under appends they came to hold more memory than the
# rest of the server. Reads go through the vector cache, so LanceDB's serve little but commits and scans, and small
# caches cost no remember throughput (docs/performance.md, 'LanceDB cache sizes').
INDEX_CACHE_BYTES = 16 * 2**20
METADATA_CACHE_BYTES = 16 * 2**20
_SCOPE_EQ = re.compile(r"scope = '((?:[^']|'')*)'")  # the one filter form the cache answers (filters.eq)
FOLLOW_S = 0.5  # object storage: how often a read starts a look for other instances' commits



class Store(TableWrites):
    """One LanceDB table of memories, opened with a zero read-consistency interval."""

    def __init__(self, table: Any, db_path: Path | str, lock: CommitLock, *, dimension: int | None = None,
                 appender: Any | None = None, storage_options: dict[str, str] | None = None,
                 load_cache: bool = True, opener: Callable[[bool], Any] | None = None) -> None:
        """``dimension`` given: keep a vector cache and search through it, loaded here (blocking) or, with
        ``load_cache=False``, by a background thread while searches use LanceDB (the server's start-up).
        ``appender``: the same table opened without read consistency, for appends (see ``add``).
        ``db_path``: the local directory, or the object-store URI (a str) with its ``storage_options``.
        ``opener(consistent)``: opens the table again, for when another process recreates it."""
        self.table = table
        self._opener = opener
        # Held to swap the handles when the table is recreated, and by every commit, so no commit runs
        # on a handle of the dropped table (``_on_new_table``).
        self._handles = threading.RLock()
        self._new_table = False  # set by the probe when another process recreated the table
        self.appender = table if appender is None else appender
        self._appender_version: int | None = None  # the version the appender is known to be at
        self.db_path = db_path
        self.storage_options = dict(storage_options or {})
        self.lock = lock
        names = set(table.schema.names)
        self.row_columns = [c for c in ROW_COLUMNS if c in names]
        self.cache: VectorCache | None = None
        self.sync: CacheSync | None = None
        self._schema: tuple[int, pa.Schema] | None = None  # (version, schema) our last append left
        self.id_index_tried = False  # once per process: a failure would fail again
        self.batcher: SearchBatcher | None = None
        self.versions_dir = retention.versions_dir(db_path, table.name)
        self.probe = VersionProbe(self.versions_dir, self.version, on_new_table=self._on_new_table)
        self.on_new_table: Callable[[], None] | None = None  # the journal forgets what it flushed to the old table
        self._followed_at = 0.0
        if dimension is not None:
            scratch = db_path if isinstance(db_path, Path) else None  # object storage: the temp dir
            self.cache = VectorCache(dimension, self.row_columns, scratch_dir=scratch)
            self.sync = CacheSync(self.cache, table, self.probe.current, self.storage_options)
            if load_cache:
                self.sync.load()
            else:
                self.sync.start_background()
            self.batcher = SearchBatcher(self.cache, self.read_at, self.refresh_cache)

    @classmethod
    def open(cls, settings: Settings, embedder: Embedder, *, load_cache: bool = True) -> Store:
        """Open or create the table (blocking; the vector cache too unless ``load_cache`` is False).

        Raises:
            EmbeddingModelMismatch: the table was built with another model or dimension.
        """
        if settings.db_dir is not None:
            settings.db_dir.mkdir(parents=True, exist_ok=True)
        # Interval 0: every read sees other processes' commits (OpenClaw, or other instances, write here too).
        session = lancedb.Session(index_cache_size_bytes=INDEX_CACHE_BYTES,
                                  metadata_cache_size_bytes=METADATA_CACHE_BYTES)
        db = connection.connect(settings, session=session)
        lock = connection.commit_lock(settings)
        where = f"{settings.db_uri}/{settings.table}"
        try:
            table = db.open_table(settings.table)
        except (FileNotFoundError, ValueError):
            with lock.hold():
                table = _create(db, settings.table, build_schema(embedder), settings.storage_options)
        check_compatible(table.schema, embedder, where)
        appender = connection.connect(settings, consistent=False, session=session).open_table(settings.table)

        def opener(consistent: bool) -> Any:
            # A fresh session: the old one still knows the dropped table and would hand it back.
            db = connection.connect(settings, consistent=consistent, session=lancedb.Session(
                index_cache_size_bytes=INDEX_CACHE_BYTES, metadata_cache_size_bytes=METADATA_CACHE_BYTES))
            try:
                return db.open_table(settings.table)
            except (FileNotFoundError, ValueError):
                return _create(db, settings.table, build_schema(embedder), settings.storage_options)

        return cls(table, settings.db_path, lock, dimension=embedder.dimension if settings.vector_cache else None,
                   appender=appender, storage_options=settings.storage_options, load_cache=load_cache,
                   opener=opener)

    # --- reads ---------------------------------------------------------------------------------

    def version(self) -> int:
        return int(self.table.version)

    def count(self, where: str | None = None) -> int:
        self._follow_new_table()
        return int(self.table.count_rows(where))

    def size_hint(self) -> int:
        """The row count for cost decisions: the cache's (no LanceDB call, maybe a commit behind)."""
        return len(self.cache) if self.cache is not None else self.count()

    def scan(self, where: str | None, columns: Sequence[str], limit: int | None = None) -> pa.Table:
        self._follow_new_table()
        query = self.table.search()
        if where:
            query = query.where(where)
        # limit(None) lifts LanceDB's default limit of 10, which would truncate a scan silently.
        return query.select(list(columns)).limit(limit).to_arrow()

    def scan_columns(self, where: str | None, columns: Sequence[str]) -> pa.Table:
        """``scan(where, columns)`` of every matching row, from the cache when it can answer ``where``
        at the table's current version (row order may differ from LanceDB's)."""
        cacheable, scope = _cache_scope(where)
        if self.cache is not None and cacheable:
            table = self.cache.scope_columns(scope, columns, self.read_at())
            if table is not None:
                return table
        return self.scan(where, columns)

    def rows_with_scores(self, ids: Sequence[str], vector: np.ndarray) -> list[dict[str, Any]]:
        """The rows of ``ids`` that exist (in ``ids`` order) with ``score`` = cosine to ``vector``:
        from the cache when current, else read back with their vectors (an IN-list scan)."""
        if self.cache is not None:
            rows = self.cache.rows_with_scores(ids, vector, self.read_at())
            if rows is not None:
                return rows
        found = {row["id"]: row for row in self.get_rows(ids, [*self.row_columns, "vector"])}
        # Deleted meanwhile, or a foreign row without a vector: left out.
        kept = [found[i] for i in dict.fromkeys(ids) if i in found and found[i].get("vector") is not None]
        if not kept:
            return []
        stored = np.array([row.pop("vector") for row in kept], dtype=np.float64)
        return with_cosines(kept, stored, vector)

    def vector_search(self, vector: np.ndarray, where: str | None, limit: int,
                      min_score: float | None = None) -> list[dict[str, Any]]:
        """Top ``limit`` rows with ``score`` (at least ``min_score`` if given), from the cache when it
        can answer ``where``, else LanceDB."""
        cacheable, scope = _cache_scope(where)
        if self.batcher is not None and cacheable:
            rows = self.batcher.search(vector, scope, limit, min_score)
            if rows is not None:
                return rows
        return _at_least(self.lancedb_search(vector, where, limit), min_score)

    async def vector_search_async(self, vector: np.ndarray, where: str | None, limit: int,
                                  min_score: float | None = None,
                                  columns: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
        """``vector_search`` without holding a worker thread while the batch thread answers;
        ``columns``: only those row columns (and ``score``), e.g. ``("id",)`` for a duplicate check."""
        cacheable, scope = _cache_scope(where)
        if self.batcher is not None and cacheable:
            rows = await asyncio.wrap_future(self.batcher.submit(vector, scope, limit, min_score, columns))
            if rows is not None:
                return rows
        return _at_least(await asyncio.to_thread(self.lancedb_search, vector, where, limit, columns), min_score)

    def read_at(self) -> int:
        """The version reads answer at: the cache's own once it holds one (a newer table is read into it by a
        background thread, never while a read waits), else the table's newest (reads then use LanceDB)."""
        held = self.cache.version if self.cache is not None else None
        if held is None or self.sync is None:
            return self.probe.current()
        if self.versions_dir is not None:  # a local table: its version is a stat away
            try:
                newer = self.probe.current() > held
            except (OSError, RuntimeError, ValueError):  # a damaged head: the index still answers (``repair``)
                newer = False
            if newer:
                self.sync.start_background()
        elif time.monotonic() - self._followed_at >= FOLLOW_S:  # object storage: the thread asks LanceDB
            self._followed_at = time.monotonic()
            self.sync.start_background()
        return held

    def index_status(self) -> dict[str, Any]:
        """What ``/readyz`` says of the vector index: its rows and version, whether it is catching up, whether
        it was restored from the saved file and which version the file (or its delta) holds."""
        if self.cache is None:
            return {"enabled": False}
        saved = self.sync.saved if self.sync is not None else None
        return {"enabled": True, "rows": len(self.cache), "version": self.cache.version,
                "catching_up": self.catching_up(), "restored": bool(saved is not None and saved.restores),
                "saved_version": saved.saved_version if saved is not None else None}

    def catching_up(self) -> bool:
        """Whether reads answer from a vector index behind the table, so rows committed since may be missing:
        a restart reading the commits made while it was down, or another writer's large change (cheap)."""
        held = self.cache.version if self.cache is not None else None
        if held is None or self.sync is None:
            return False  # reads use LanceDB, which sees every commit
        if self.versions_dir is None:  # object storage: a version is a request away; the thread knows
            return self.sync.in_background
        try:
            return self.probe.current() > held
        except (OSError, RuntimeError, ValueError):
            return False

    def refresh_cache(self) -> None:
        """Bring the cache up to the table after commits it was not told about (the batch thread calls
        it; never raises). Small changes are read now, without the write lock: each is applied only if
        the cache is still where it started (``CacheSync``); larger ones go to a background thread while
        searches use LanceDB."""
        if self.sync is not None:
            self.sync.catch_up(cache_sync.CATCH_UP_WAIT_S)

    def lancedb_search(self, vector: np.ndarray, where: str | None, limit: int,
                       columns: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """LanceDB's exact flat scan (any filter); ``columns``: only those row columns."""
        self._follow_new_table()
        query = self.table.search(vector.astype(np.float32), vector_column_name="vector").distance_type("cosine")
        if where:
            query = query.where(where, prefilter=True)
        query = query.select([*(self.row_columns if columns is None else columns), "_distance"]).limit(limit)
        rows: list[dict[str, Any]] = query.to_arrow().to_pylist()
        for row in rows:
            row["score"] = 1.0 - float(row.pop("_distance"))
        return rows

    def get_rows(self, ids: Sequence[str], columns: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """The rows of ``ids`` that exist, in no set order: from the cache when it is current and holds
        ``columns`` (it holds every row column, not the vector), else an IN-list scan."""
        if not ids:
            return []
        wanted = list(columns or self.row_columns)
        if self.cache is not None and all(c in self.cache.row_columns for c in wanted):
            rows = self.cache.rows(ids, self.read_at())
            if rows is not None:
                return rows if columns is None else [{c: row.get(c) for c in wanted} for row in rows]
        return self._scan_rows(ids, wanted)

    def _scan_rows(self, ids: Sequence[str], columns: Sequence[str]) -> list[dict[str, Any]]:
        table = self.scan(filters.is_in("id", ids), columns, limit=len(ids) * 2 + 1)
        rows: list[dict[str, Any]] = table.to_pylist()
        return rows

    def get_vector(self, memory_id: str) -> np.ndarray | None:
        if self.cache is not None:
            held = self.cache.vector(memory_id, self.read_at())
            if held is not None:
                return held if len(held) else None
        rows = self.get_rows([memory_id], ["id", "vector"])
        return None if not rows else np.asarray(rows[0]["vector"], dtype=np.float32)

    def _on_new_table(self, reason: str) -> None:
        """Another process dropped the table and created it again (``VersionProbe``, under its lock): the
        cache forgets the old table before any search sees the new version; the handles follow it before
        the next commit or LanceDB read (``_follow_new_table``)."""
        logger.warning("the memory table at %s is a new table (%s): another process dropped and created it; "
                       "reloading the vector cache and writing to the new table", self.versions_dir, reason)
        if self.cache is not None:
            self.cache.invalidate()
        self._new_table = True
        if self.on_new_table is not None:
            self.on_new_table()

    def _follow_new_table(self) -> None:
        """Open the new table in place of the dropped one's handles, and load the cache from it."""
        if not self._new_table or self._opener is None:
            return
        with self._handles:
            if not self._new_table:
                return
            try:
                self.table, self.appender = self._opener(True), self._opener(False)
            except Exception:  # noqa: BLE001 - dropped and not created yet: the next request retries
                logger.warning("the memory table is not there yet; retrying on the next request", exc_info=True)
                return
            self._new_table = False
            self._appender_version = None
            self._schema = None
            self.id_index_tried = False
            self.probe.adopt()
            if self.sync is not None:
                self.sync.use_table(self.table, self.storage_options)
                self.sync.start_background()

def _create(db: Any, name: str, schema: pa.Schema, storage_options: dict[str, str]) -> Any:
    """Create the table, or open it when another instance created it first: on object storage no lock
    spans instances, and LanceDB's conditional put of the first version lets one creator win."""
    try:
        return table_format.create(db, name, schema, storage_options)
    except (OSError, ValueError, RuntimeError):
        return db.open_table(name)


def _at_least(rows: list[dict[str, Any]], min_score: float | None) -> list[dict[str, Any]]:
    return rows if min_score is None else [row for row in rows if row["score"] >= min_score]


def _cache_scope(where: str | None) -> tuple[bool, str | None]:
    """(the cache can answer, scope) for the filters the service uses: none, or one scope equality."""
    if where is None:
        return True, None
    match = _SCOPE_EQ.fullmatch(where)
    return (True, match.group(1).replace("''", "'")) if match else (False, None)

