"""The write half of ``Store``: commits under the write lock, each telling the vector cache the versions
around it. The journal's flusher (``app/memory/journal/flusher.py``) is the one caller on the request
path: it runs ``locked`` once per flush and the ``*_held`` commits inside it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa

from app.memory.index import VectorCache
from app.memory.store import cache_sync, commits, filters, retention, tail_merge
from app.memory.store.cache_sync import CacheSync
from app.memory.store.locks import CommitLock
from app.memory.store.version_probe import VersionProbe

T = TypeVar("T")
# Old versions stay this long after they stopped being the newest (``retention``), for readers still on
# them (another process's scan, an export). Not longer: each version kept makes every LanceDB call
# through a zero-interval handle slower, the time going to directory listings; appends avoid it
# (``add_held``), updates, deletes and merges do not (docs/performance.md, 'Old versions kept').
OLD_VERSIONS_KEPT = timedelta(minutes=2)


class TableWrites:
    """Mixed into ``Store``, which sets these attributes."""

    table: Any
    appender: Any
    lock: CommitLock
    cache: VectorCache | None
    sync: CacheSync | None
    probe: VersionProbe
    versions_dir: Path | None
    _handles: threading.RLock
    _new_table: bool
    _appender_version: int | None
    _schema: tuple[int, pa.Schema] | None

    def version(self) -> int:
        raise NotImplementedError

    def count(self, where: str | None = None) -> int:
        raise NotImplementedError

    def _on_new_table(self, reason: str) -> None:
        raise NotImplementedError

    def _follow_new_table(self) -> None:
        raise NotImplementedError

    def _scan_rows(self, ids: Sequence[str], columns: Sequence[str]) -> list[dict[str, Any]]:
        raise NotImplementedError


    def locked(self, work: Callable[[], T]) -> T:
        """Run ``work`` under the write lock with the handles on the current table, retrying all of it on
        Lance's transient conflicts (``commits``): ``work`` must be safe to run again."""

        def held() -> T:
            with self._handles:
                if self.versions_dir is not None and not _has_manifest(self.versions_dir):
                    self._on_new_table("it is gone; created again")  # never commit onto a dropped table's path
                    self._follow_new_table()
                self.probe.current()  # finds a recreated table first (``_on_new_table``)
                self._follow_new_table()
                if self._new_table:  # not opened or created yet: the old handles would write the dropped lineage
                    raise OSError("the memory table was dropped and is not there again yet; the write waits")
                return work()

        return commits.locked_with_retry(self.lock, held)

    def add(self, rows: list[dict[str, Any]]) -> int:
        return self.locked(lambda: self.add_held(rows))

    def update(self, memory_id: str, values: dict[str, Any]) -> int:
        """Update columns in place (vectors of untouched columns stay bit-exact); returns rows updated."""
        return self.locked(lambda: self.patch_held([{"id": memory_id, **values}]))

    def delete(self, memory_id: str) -> int:
        return self.locked(lambda: self.delete_held([memory_id]))

    def add_held(self, rows: list[dict[str, Any]]) -> int:
        """Append rows in one commit; returns the table version after it.

        The append goes through ``appender``, a handle with no read consistency, brought to the newest
        version only when the version read under the lock says another commit came in between. With a
        zero interval, LanceDB first lists the whole ``_versions`` directory on every call, so an
        append would cost more with every version kept; through this handle it does not
        (docs/performance.md, 'Appends skip the version listing').
        """

        def commit(version: int | None) -> Any:
            schema = self._schema_at(version)
            appender = self._appender_at(version)
            result = appender.add(commits.to_arrow(rows, schema))
            self._appender_version = int(result.version) if appender is not self.table else None
            if version is not None and result.version == version + 1:  # nobody else committed meanwhile
                self._schema = (result.version, schema)  # and an append keeps the schema
            return result

        result = self._commit_held(commit, lambda cache, r, before: cache.apply_add(rows, before, r.version))
        return int(result.version)

    def patch_held(self, rows: list[dict[str, Any]]) -> int:
        """Set the given columns of existing rows (``{"id", column: value, …}``, all with the same columns) in
        one commit; a row that is gone stays gone. Returns how many rows were updated."""
        if not rows:
            return 0
        columns = [c for c in rows[0] if c != "id"]

        def commit(version: int | None) -> Any:
            schema = self._schema_at(version)
            subset = pa.schema([schema.field("id"), *(schema.field(c) for c in columns if c in schema.names)])
            return self.table.merge_insert("id").when_matched_update_all().execute(commits.to_arrow(rows, subset))

        updates = {str(row["id"]): {c: row[c] for c in columns} for row in rows}
        result = self._commit_held(commit, lambda cache, r, before: cache.apply_updates(updates, before, r.version))
        return int(result.num_updated_rows)

    def delete_held(self, ids: Sequence[str]) -> int:
        result = self._commit_held(lambda _: self.table.delete(filters.is_in("id", ids)),
                                   lambda cache, r, before: cache.apply_delete(list(ids), before, r.version))
        return int(result.num_deleted_rows)

    def existing_ids(self, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` the table holds now (caller holds the write lock): from the cache when it is at
        the table's version, else a scan of the id column."""
        if not ids:
            return set()
        if self.cache is not None:
            self._catch_up_held()
            rows = self.cache.rows(ids, self.probe.current()) if self.cache.version == self.probe.current() else None
            if rows is not None:
                return {str(row["id"]) for row in rows}
        return {str(row["id"]) for row in self._scan_rows(ids, ["id"])}

    def optimize(self) -> None:
        """Compact fragments and prune the versions superseded more than ``OLD_VERSIONS_KEPT`` ago
        (``retention``: a reader still on a version that was the newest since then survives)."""

        def change(_: int | None) -> Any:
            age = retention.prune_age(self.versions_dir, OLD_VERSIONS_KEPT, table=self.table)
            return self.table.optimize(cleanup_older_than=age)

        self.commit(change, self._after_rewrite)

    def merge_tail(self, rows: int) -> int:
        """Rewrite the last ``rows`` rows into one fragment (``tail_merge``); returns the rows rewritten."""
        return tail_merge.merge_tail(self, rows)

    def commit(self, change: Callable[[int | None], T], tell: Callable[[VectorCache, T, int], None]) -> T:
        """One commit under the write lock (with retries): ``locked`` around ``_commit_held``."""
        return self.locked(lambda: self._commit_held(change, tell))

    def _commit_held(self, change: Callable[[int | None], T], tell: Callable[[VectorCache, T, int], None]) -> T:
        """Run one commit (caller holds the lock); ``tell`` the cache the versions around it.

        ``change`` gets the table version read under the lock (None without a cache), off the version
        directory's files (``version_probe``) rather than from LanceDB, whose call through its event
        loop is about a hundred times slower under load (docs/performance.md, 'Version reads').
        """
        if self.cache is None:
            return change(None)
        self._catch_up_held()
        before = self.probe.current()
        with self.cache.writing(before):  # searches meanwhile answer from the pre-commit state
            result = change(before)
            tell(self.cache, result, before)
        return result

    def _catch_up_held(self) -> None:
        """Another writer committed since the cache last caught up: take that in first (caller holds the lock),
        so our next commit applies in place (a compaction's rows would otherwise be read back as new)."""
        if self.cache is None or self.sync is None:
            return
        if (self.cache.version or 0) < self.probe.current():
            self.sync.catch_up(cache_sync.CATCH_UP_WAIT_S)

    def _after_rewrite(self, cache: VectorCache, _: object, before: int) -> None:
        after = self.version()  # optimize returns no version
        cache.apply_rewrite(before, after)
        # A compaction never changes the rows; if the cache took it in and they differ, reload. (A cache
        # left behind is not comparable: it catches up later, the compaction included.)
        if cache.version == after and self.count() != len(cache):
            cache.invalidate()

    def _appender_at(self, version: int | None) -> Any:
        """The append handle, moved to the newest version unless it is known to be at ``version``.

        Even a handle left behind (a writer that ignores our lock) commits correctly: Lance finds the
        newer versions at commit time and rebases the append onto them.
        """
        if self.appender is not self.table and (version is None or self._appender_version != version):
            self.appender.checkout_latest()
        return self.appender

    def _schema_at(self, version: int | None) -> pa.Schema:
        """The table's schema at ``version`` (read under the write lock; None: unknown).

        Each read is a LanceDB call through its event loop, a large share of a commit's Python time
        under load (docs/performance.md, 'Version reads'). A schema changes only with a commit, so the
        schema our last append left is still the table's while the table is at that append's version.
        """
        if version is None or self._schema is None or self._schema[0] != version:
            return self.table.schema
        return self._schema[1]


def _has_manifest(versions_dir: Path) -> bool:
    """Whether the table's version directory holds a manifest: a drop may leave the directory (or another
    writer's first file in it) without one, and a commit through a handle of the dropped table would then
    write a version naming its deleted data files."""
    try:
        with os.scandir(versions_dir) as entries:
            return any(entry.name.endswith(".manifest") for entry in entries)
    except OSError:
        return False
