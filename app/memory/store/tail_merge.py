"""Tail merges: fold the small fragments of recent commits into one, without a full compaction.

Every fragment makes each later commit slower, and a full ``optimize`` rewrites the whole table
because Lance merges the small fragments into the large one before them. Rewriting only the tail, as
an update of each row with its own values, costs a few tens of milliseconds (docs/performance.md,
'Compaction and tail merges').

Other writers (ones that ignore our lock) keep their changes: a row is rewritten only if its columns
still equal what was read, and the update re-checks that on a retry. Vectors are not compared (that
reads every row's vector); when another commit landed during the merge, a vector it changed is put
back (``restore_vectors``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

import lancedb
import pyarrow as pa
from lancedb.index import BTree

from app.memory.index import VectorCache
from app.memory.store import filters

logger = logging.getLogger(__name__)

T = TypeVar("T")


class Store(Protocol):
    """What a tail merge needs of the store (``table.Store``), so this module need not import it."""

    table: Any
    db_path: Path | str
    storage_options: dict[str, str]
    id_index_tried: bool

    def version(self) -> int: ...

    def count(self, where: str | None = None) -> int: ...

    def scan(self, where: str | None, columns: Sequence[str], limit: int | None = None) -> pa.Table: ...

    def commit(self, change: Callable[[int | None], T], tell: Callable[[VectorCache, T, int], None]) -> T: ...


def merge_tail(store: Store, rows: int) -> int:
    """Rewrite the last ``rows`` rows into one fragment, in one commit; returns the rows rewritten."""

    def change(version: int | None) -> Any:
        before = store.version() if version is None else version
        total = store.count()
        tail = store.table.take_offsets(list(range(max(0, total - rows), total))).to_arrow()
        if tail.num_rows == 0:
            return None
        result = store.table.merge_insert("id").when_matched_update_all(where=unchanged(tail.schema)).execute(tail)
        if int(result.version) != before + 1:
            restore_vectors(store, tail, before, int(result.version))
        return result

    def tell(cache: VectorCache, result: Any, before: int) -> None:
        if result is not None:
            cache.apply_rewrite(before, int(result.version), one_commit=True)

    ensure_id_index(store)
    result = store.commit(change, tell)
    return 0 if result is None else int(result.num_updated_rows)


def ensure_id_index(store: Store) -> None:
    """Give the table a BTree index on ``id`` if it has none (one commit), once per store.

    Why: a tail merge joins its rows to the table by id; without the index Lance reads every row for
    the join. Built by the first merge, not on open, so that opening a table (OpenClaw's, say) changes
    nothing. The index only speeds things up: failing to build it is logged, not raised.
    """
    if store.id_index_tried:
        return
    store.id_index_tried = True

    def has_index() -> bool:
        return any(list(config.columns) == ["id"] for config in store.table.list_indices())

    def build(_: int | None) -> bool:
        if has_index():  # another process may have built it
            return False
        store.table.create_index("id", config=BTree(), replace=False)
        return True

    def tell(cache: VectorCache, built: bool, before: int) -> None:
        if built:
            cache.apply_rewrite(before, store.version(), one_commit=True)

    try:
        if not has_index():
            store.commit(build, tell)
    except Exception:  # noqa: BLE001 - an optimisation; merges are correct without it
        logger.exception("could not index the id column; tail merges read the whole table")


def restore_vectors(store: Store, tail: pa.Table, before: int, merged: int) -> None:
    """Put back the vectors that commits between ``before`` and our merge (``merged``) gave tail rows
    after we read them, where the merge wrote the old vector over them."""
    ours = dict(zip(tail["id"].to_pylist(), tail["vector"].to_pylist(), strict=True))
    theirs: dict[str, Any] = {}
    past_db = lancedb.connect(str(store.db_path), storage_options=store.storage_options or None)
    past = past_db.open_table(store.table.name)
    for version in range(merged - 1, before, -1):  # newest first: the last change of a row wins
        past.checkout(version)
        seen = past.search().where(filters.is_in("id", list(ours))).select(["id", "vector"]).limit(None).to_arrow()
        for memory_id, vector in zip(seen["id"].to_pylist(), seen["vector"].to_pylist(), strict=True):
            if memory_id not in theirs and vector != ours[memory_id]:
                theirs[memory_id] = vector
    if not theirs:
        return
    now = store.scan(filters.is_in("id", list(theirs)), ["id", "vector"])
    for memory_id, vector in zip(now["id"].to_pylist(), now["vector"].to_pylist(), strict=True):
        if vector == ours[memory_id]:  # still the one we wrote back (not changed again since)
            store.table.update(where=filters.eq("id", memory_id), values={"vector": theirs[memory_id]})
            logger.info("restored the vector another writer gave memory %s during a tail merge", memory_id)


def unchanged(schema: pa.Schema) -> str:
    """A merge condition: the target row still equals the source row in every column (nulls equal)."""
    parts = []
    for field in schema:
        if field.name in ("id", "vector"):  # comparing vectors would read every target row's vector
            continue
        name = f"`{field.name}`"
        parts.append(f"(target.{name} = source.{name} OR (target.{name} IS NULL AND source.{name} IS NULL))")
    return " AND ".join(parts)
