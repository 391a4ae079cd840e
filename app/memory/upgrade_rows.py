"""``memory-mcp upgrade-rows``: rows earlier memory-mcp versions wrote, brought to memory-lancedb-pro's format.

Those rows lack the plugin's smart metadata, so its ``upgrade --dry-run`` counts them as legacy and OpenClaw
asks to upgrade them (which would read our ``source`` as "legacy"). Here each gets the fields a row
written today carries (``smart_metadata.stamp``): only the metadata column changes, text and vector
stay bit-exact. A row is ours when its metadata says so (``source`` or ``origin`` memory-mcp); the
plugin's own legacy rows are left to its upgrader, which may enrich them with an LLM.

The scan reads one pinned version; each batch is read again and written under the write lock the
server and the plugin take, so a change another writer made meanwhile is kept, and running it beside
them is safe. Running it twice changes nothing the second time. The server does the same lazily: an
update of such a row through memory-mcp stamps it (``smart_metadata.revised``).
"""

from __future__ import annotations

import json
import time
from typing import Any

import pyarrow as pa
from pydantic import BaseModel

from app.memory import smart_metadata
from app.memory.export import open_snapshot, scan_batches
from app.memory.rows import tags_of
from app.memory.store import connection, filters
from app.memory.store.diagnostics import Check
from app.memory.store.schema import parse_metadata
from app.memory.transfer import with_retry
from app.settings import Settings

DEFAULT_BATCH = 500
_COLUMNS = ["id", "text", "category", "timestamp", "metadata"]


class UpgradeReport(BaseModel):
    """What ``upgrade_rows`` found and did; ``legacy_foreign``: the plugin's own legacy rows, left alone."""

    db_path: str
    table: str
    rows: int = 0
    legacy_ours: int = 0
    upgraded: int = 0
    legacy_foreign: int = 0
    dry_run: bool = False
    seconds: float = 0.0


def _needs_stamp(row: dict[str, Any]) -> dict[str, Any] | None:
    """The row's new metadata when it is ours and legacy in the plugin's eyes, else None."""
    metadata = parse_metadata(row.get("metadata"))
    if not smart_metadata.is_ours(metadata) or not smart_metadata.is_legacy(row.get("category"), metadata):
        return None
    return smart_metadata.stamp(metadata, text=row.get("text") or "", tags=tags_of(row, metadata),
                                column=row.get("category"), timestamp=int(row.get("timestamp") or 0))


def _stamp_batch(table: Any, ids: list[str]) -> int:
    """Under the lock: read the rows again and write the metadata of those still needing it."""
    fresh = table.search().where(filters.is_in("id", ids)).select(_COLUMNS).limit(len(ids) * 2 + 1).to_list()
    changes = [(row["id"], stamped) for row in fresh if (stamped := _needs_stamp(row)) is not None]
    if changes:
        source = pa.table({"id": pa.array([i for i, _ in changes], type=pa.string()),
                           "metadata": pa.array([json.dumps(m, ensure_ascii=False) for _, m in changes],
                                                type=table.schema.field("metadata").type)})
        table.merge_insert("id").when_matched_update_all().execute(source)
    return len(changes)


def upgrade_rows(settings: Settings, *, dry_run: bool = False, batch_size: int = DEFAULT_BATCH) -> UpgradeReport:
    """Give every row of ours that the plugin counts as legacy its smart metadata (``dry_run``: count only).

    Raises:
        TableMissing: no such table. StoreBusy: the write lock stayed held (rows done so far stay done).
    """
    started = time.monotonic()
    report = UpgradeReport(db_path=str(settings.db_path), table=settings.table, dry_run=dry_run)
    pending: list[str] = []
    for rows in scan_batches(open_snapshot(settings), _COLUMNS, None, batch_size):
        report.rows += len(rows)
        for row in rows:
            metadata = parse_metadata(row.get("metadata"))
            if not smart_metadata.is_legacy(row.get("category"), metadata):
                continue
            if smart_metadata.is_ours(metadata):
                pending.append(str(row["id"]))
            else:
                report.legacy_foreign += 1
    report.legacy_ours = len(pending)
    if not dry_run and pending:
        table = connection.connect(settings).open_table(settings.table)
        lock = connection.commit_lock(settings)
        for start in range(0, len(pending), batch_size):
            ids = pending[start:start + batch_size]

            def commit(ids: list[str] = ids) -> int:
                with lock.hold():
                    return _stamp_batch(table, ids)

            report.upgraded += with_retry(commit)
    report.seconds = time.monotonic() - started
    return report


def check(settings: Settings) -> Check | None:
    """``doctor``'s check: rows of ours the plugin counts as legacy (a LIKE pre-filter keeps the scan to the
    candidates). None when there is no table or it cannot be read: the table check says why."""
    try:
        table = open_snapshot(settings)
        if not {"metadata", "category"} <= set(table.schema.names):
            return None
        candidates = "metadata LIKE '%memory-mcp%' AND metadata NOT LIKE '%\"memory_category\"%'"
        rows = table.search().where(candidates).select(["category", "metadata"]).limit(None).to_list()
    except Exception:  # noqa: BLE001 - TableMissing, or a damaged table the table check reports
        return None
    legacy = sum(1 for row in rows if _needs_stamp({**row, "text": ""}) is not None)
    if not legacy:
        return Check(name="row_format", status="ok",
                     detail="memory-mcp's rows are in memory-lancedb-pro's current format")
    return Check(name="row_format", status="warn",
                 detail=f"{legacy} rows an earlier memory-mcp wrote lack memory-lancedb-pro's smart metadata "
                        "(the plugin counts them as legacy and asks to upgrade them)",
                 fix="`memory-mcp upgrade-rows` (the metadata column only; safe beside the server and the plugin)")
