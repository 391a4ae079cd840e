"""Migrate a store to another embedding model: copy every row into a new table with fresh vectors.

The source table is only read (pinned at one version); the target is a new table beside it or in
another directory, created with the source's columns and the new model's identity in its schema
metadata, so the server opens it with that provider and refuses any other. Ids already in the
target are skipped, so re-running after an interruption resumes without doubling a row.
"""

from __future__ import annotations

import asyncio
import time

import pyarrow as pa

from app.memory.embeddings.base import Embedder
from app.memory.export import open_snapshot, scan_batches
from app.memory.store import connection
from app.memory.store.lease import CompactionLease
from app.memory.store.retention import prune_age, versions_dir
from app.memory.store.writes import OLD_VERSIONS_KEPT
from app.memory.transfer import (
    DEFAULT_BATCH,
    Progress,
    SameTable,
    TransferReport,
    finish,
    open_target,
    with_retry,
    write_batch,
)
from app.settings import Settings


def default_target_table(source_table: str, embedder: Embedder) -> str:
    """``memories_<provider>_<dimension>``: a new table beside the source, one per model."""
    return f"{source_table}_{embedder.name}_{embedder.dimension}"[:64]


async def reembed(source: Settings, target: Settings, embedder: Embedder, *, batch_size: int = DEFAULT_BATCH,
                  progress: Progress | None = None) -> TransferReport:
    """Copy every row of the source into a new table with vectors from ``embedder``; the source is only read.

    Resumable: ids already in the target are skipped, so a re-run after an interruption completes the
    same row set without duplicates.

    Raises:
        SameTable: target and source are the same table. TableMissing: no source table.
        EmbeddingModelMismatch: the target exists with another model.
    """
    if _same_place(source, target) and source.table == target.table:
        raise SameTable(f"re-embedding into the source table {source.table!r} would mutate it; "
                        "use --into NEW_DB or another --table")
    started = time.monotonic()
    snapshot = await asyncio.to_thread(open_snapshot, source)
    schema: pa.Schema = snapshot.schema
    store = await asyncio.to_thread(open_target, target, embedder, schema)
    report = TransferReport(db_path=str(target.db_path), table=target.table, embedding=embedder.identity)
    known = set(store.table.schema.names)
    report.dropped_columns = [name for name in schema.names if name not in known]  # a pre-existing target
    total = int(await asyncio.to_thread(snapshot.count_rows))
    columns = [name for name in schema.names if name != "vector"]
    batches = 0
    stream = scan_batches(snapshot, columns, None, batch_size)
    while (rows := await asyncio.to_thread(next, stream, None)) is not None:  # reads off the loop
        await write_batch(store, embedder, rows, False, report)
        batches += 1
        if progress:
            progress(report.read, total)
    return await finish(store, batches, report, started)


def compact_table(settings: Settings) -> bool:
    """Compact fragments under the write lock (on object storage, the compaction lease), keeping recent
    versions for other readers (any model). Returns False when another instance holds the lease."""
    table = open_snapshot(settings)
    table.checkout_latest()
    manifests = versions_dir(settings.db_path, settings.table)

    def compact() -> None:
        with connection.commit_lock(settings).hold():
            with_retry(lambda: table.optimize(cleanup_older_than=prune_age(manifests, OLD_VERSIONS_KEPT, table=table)))

    if not settings.on_object_store:
        compact()
        return True
    with CompactionLease(connection.connect(settings), settings.table).held() as mine:
        if mine:
            compact()
        return mine


def _same_place(a: Settings, b: Settings) -> bool:
    if a.db_dir is not None and b.db_dir is not None:
        return a.db_dir.resolve() == b.db_dir.resolve()
    return a.db_uri == b.db_uri
