"""Export the memory table as JSONL: a header line, then every row with every column.

The header holds the table's embedding identity (for a memory-lancedb-pro table, which records none,
the one openclaw.json names for its directory) and its Arrow schema, so an import (``transfer``) can
rebuild extra (plugin) columns with their exact types and knows whose vectors it holds.

Reads pin one table version, so an export is a consistent snapshot even while a server writes.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, TextIO

import numpy as np
import pyarrow as pa
from pydantic import BaseModel

from app.errors import NotFound
from app.memory.store import connection, filters
from app.memory.store.schema import recorded_identity, vector_dimension
from app.settings import Settings

FORMAT = "memory-mcp-export"
FORMAT_VERSION = 1
DEFAULT_BATCH = 500
#: ``progress(done, total)``; total is None when unknown.
Progress = Callable[[int, int | None], None]


class TableMissing(NotFound):
    code = "table_not_found"


class ExportReport(BaseModel):
    rows: int
    vectors: bool
    table_version: int
    seconds: float


def open_snapshot(settings: Settings) -> Any:
    """The table pinned at its current version, opened without creating anything (directory or URI).

    Raises:
        TableMissing: no such directory or table.
    """
    where, table_name = settings.db_uri, settings.table
    if settings.db_dir is not None and not settings.db_dir.is_dir():
        raise TableMissing(f"no LanceDB directory at {where}; check --db / MEMORY_MCP_DB_PATH")
    db = connection.connect(settings)
    try:
        table = db.open_table(table_name)
    except (FileNotFoundError, ValueError) as exc:
        raise TableMissing(f"no table {table_name!r} in {where}; check --table / MEMORY_MCP_TABLE") from exc
    table.checkout(table.version)  # one consistent snapshot while other processes write
    return table


def scan_batches(table: Any, columns: list[str], where: str | None, batch_size: int) -> Iterator[list[dict[str, Any]]]:
    """Rows in batches straight from the table's stream; never the whole table in memory."""
    query = table.search()
    if where:
        query = query.where(where)
    reader = query.select(columns).limit(None).to_batches(batch_size)
    for batch in reader:
        if batch.num_rows:
            yield batch.to_pylist()


def _json_default(value: object) -> object:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, np.generic):
        return value.item()
    return str(value)


def vectors_identity(settings: Settings, schema: pa.Schema) -> dict[str, str] | None:
    """The model of the table's vectors: recorded in the table, or else (a memory-lancedb-pro table) the
    one ``serve`` takes from openclaw.json for this directory, when its size is the table's."""
    recorded = recorded_identity(schema)
    if recorded is not None:
        return recorded
    from app.memory.embeddings.openclaw import plugin_identity  # reads openclaw.json only when needed

    named = plugin_identity(settings)
    if named is None or named["dimension"] != str(vector_dimension(schema)):
        return None
    return {**named, "from": "openclaw.json"}


def export_header(table: Any, *, vectors: bool, scope: str | None, rows: int,
                  identity: dict[str, str] | None = None) -> dict[str, Any]:
    """``identity``: the vectors' model (``vectors_identity``); by default what the table records."""
    schema: pa.Schema = table.schema
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "table": table.name,
        "table_version": int(table.version),
        "rows": rows,
        "scope": scope,
        "vectors": vectors,
        "embedding": identity if identity is not None else recorded_identity(schema),
        "dimension": vector_dimension(schema),
        "columns": [name for name in schema.names if vectors or name != "vector"],
        "arrow_schema": base64.b64encode(schema.serialize().to_pybytes()).decode("ascii"),
        "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def export_jsonl(settings: Settings, out: TextIO, *, vectors: bool = False, scope: str | None = None,
                 batch_size: int = DEFAULT_BATCH, progress: Progress | None = None) -> ExportReport:
    """Write a header line and one JSON line per row (every column; the vector only if asked).

    Raises:
        TableMissing: the table does not exist.
    """
    from app.memory.journal.offline import fold_journal

    started = time.monotonic()
    fold_journal(settings)  # acknowledged writes a server journaled but had not flushed yet are exported too
    table = open_snapshot(settings)
    where = filters.eq("scope", scope) if scope is not None else None
    total = int(table.count_rows(where))
    header = export_header(table, vectors=vectors, scope=scope, rows=total,
                           identity=vectors_identity(settings, table.schema))
    out.write(json.dumps(header, ensure_ascii=False) + "\n")
    done = 0
    for rows in scan_batches(table, header["columns"], where, batch_size):
        out.write("".join(json.dumps(r, ensure_ascii=False, default=_json_default) + "\n" for r in rows))
        done += len(rows)
        if progress:
            progress(done, total)
    out.flush()
    return ExportReport(rows=done, vectors=vectors, table_version=header["table_version"],
                        seconds=time.monotonic() - started)
