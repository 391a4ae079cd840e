"""The proposed ``VectorCache`` integration, applied to ``Store`` at run time for the benchmark only.

This is the exact change proposed for ``app/memory/store.py`` (see the report): every commit reads
the table version before and after itself under the write lock and tells the cache; ``vector_search``
asks the cache first and falls back to LanceDB (then reloads) when the versions differ. It is patched
in here so the speed benchmark can measure it end to end without editing the store's owner's file.

    python -m bench.cache_patch serve     # the normal CLI, with the cache
"""

from __future__ import annotations

import re
import sys
import threading
from typing import Any

import numpy as np

from app.memory import filters
from app.memory.store import OLD_VERSIONS_KEPT, Store, new_id
from app.memory.vector_cache import VectorCache

_SCOPE_EQ = re.compile(r"^scope = '((?:[^']|'')*)'$")


def _scope_of(where: str | None) -> tuple[bool, str | None]:
    """(cache can answer, scope) for the filters the service uses: none, or one scope equality."""
    if where is None:
        return True, None
    match = _SCOPE_EQ.match(where)
    return (True, match.group(1).replace("''", "'")) if match else (False, None)


def install() -> None:
    original_open = Store.open.__func__  # type: ignore[attr-defined]
    original_search = Store.vector_search
    original_fix = Store._fix_id_collisions

    def open_(cls: type[Store], settings: Any, embedder: Any) -> Store:
        store: Store = original_open(cls, settings, embedder)
        store.cache = VectorCache(embedder.dimension, store.row_columns)  # type: ignore[attr-defined]
        store.cache.reload(store.table)  # type: ignore[attr-defined]
        store._reloading = threading.Lock()  # type: ignore[attr-defined]
        return store

    def vector_search(self: Store, vector: np.ndarray, where: str | None, limit: int) -> list[dict[str, Any]]:
        cacheable, scope = _scope_of(where)
        if cacheable:
            rows = self.cache.search(vector, scope, limit, self.version())  # type: ignore[attr-defined]
            if rows is not None:
                return rows
            if self._reloading.acquire(blocking=False):  # type: ignore[attr-defined]
                try:
                    self.cache.reload(self.table)  # type: ignore[attr-defined]
                finally:
                    self._reloading.release()  # type: ignore[attr-defined]
                rows = self.cache.search(vector, scope, limit, self.version())  # type: ignore[attr-defined]
                if rows is not None:
                    return rows
        return original_search(self, vector, where, limit)

    def fix_id_collisions(self: Store, rows: list[dict[str, Any]]) -> None:
        # The cache knows every id at the current version: a dict lookup instead of an IN-list scan.
        for _ in range(10):
            ids = [row["id"] for row in rows]
            taken = self.cache.known_ids(ids)  # type: ignore[attr-defined]
            if taken is None or self.cache.version != self.version():  # type: ignore[attr-defined]
                return original_fix(self, rows)
            seen: set[str] = set()
            clashes = 0
            for row in rows:
                if row["id"] in taken or row["id"] in seen:
                    row["id"] = new_id()
                    clashes += 1
                seen.add(row["id"])
            if not clashes:
                return None
        raise RuntimeError("could not find free memory ids")

    def add(self: Store, rows: list[dict[str, Any]]) -> None:
        def commit() -> None:
            fix_id_collisions(self, rows)
            with self.cache.writing():  # type: ignore[attr-defined]
                before = self.version()
                self.table.add(self.to_arrow(rows))
                self.cache.apply_add(rows, before, self.version())  # type: ignore[attr-defined]

        self._locked_with_retry(commit)

    def update(self: Store, memory_id: str, values: dict[str, Any]) -> int:
        def commit() -> Any:
            with self.cache.writing():  # type: ignore[attr-defined]
                before = self.version()
                result = self.table.update(where=filters.eq("id", memory_id), values=values)
                self.cache.apply_update(memory_id, values, before, self.version())  # type: ignore[attr-defined]
            return result

        return int(self._locked_with_retry(commit).rows_updated)

    def delete(self: Store, memory_id: str) -> int:
        def commit() -> Any:
            with self.cache.writing():  # type: ignore[attr-defined]
                before = self.version()
                result = self.table.delete(filters.eq("id", memory_id))
                self.cache.apply_delete([memory_id], before, self.version())  # type: ignore[attr-defined]
            return result

        return int(self._locked_with_retry(commit).num_deleted_rows)

    def optimize(self: Store) -> None:
        def commit() -> None:
            with self.cache.writing():  # type: ignore[attr-defined]
                before = self.version()
                self.table.optimize(cleanup_older_than=OLD_VERSIONS_KEPT)
                self.cache.apply_rewrite(before, self.version())  # type: ignore[attr-defined]

        self._locked_with_retry(commit)

    Store.open = classmethod(open_)  # type: ignore[method-assign,assignment]
    Store.vector_search = vector_search  # type: ignore[method-assign]
    Store.add = add  # type: ignore[method-assign]
    Store.update = update  # type: ignore[method-assign]
    Store.delete = delete  # type: ignore[method-assign]
    Store.optimize = optimize  # type: ignore[method-assign]


if __name__ == "__main__":
    from app.cli import main

    install()
    sys.exit(main(sys.argv[1:]))
