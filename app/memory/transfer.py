"""Import an export (``export``) and the writes ``reembed`` shares with it, with every column and every row.

The export's header says whose vectors it holds: ``import_vectors`` keeps them for the same model and
never embeds with another one unasked; its Arrow schema rebuilds extra (plugin) columns exactly.

Writes never go through the server's writer (which would give colliding ids fresh ones): each batch
is checked for ids already present and appended under the same cross-process lock the server takes,
so an import or re-embed is idempotent, resumable and safe beside a running server.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
from pydantic import BaseModel

from app.errors import InvalidInput
from app.memory.embeddings.base import Embedder
from app.memory.errors import StoreBusy
from app.memory.export import FORMAT, FORMAT_VERSION, Progress
from app.memory.import_vectors import Mode, keeps_vectors
from app.memory.store import connection, filters, table_format
from app.memory.store.commits import is_retryable
from app.memory.store.schema import build_schema
from app.memory.store.table import Store
from app.settings import Settings

logger = logging.getLogger(__name__)

DEFAULT_BATCH = 500
MAX_ATTEMPTS = 8
COMPACT_AFTER_COMMITS = 8  # an import of many batches leaves one fragment per batch
T = TypeVar("T")


class InvalidExport(InvalidInput):
    code = "invalid_export"


class SameTable(InvalidInput):
    code = "same_table"


class TransferReport(BaseModel):
    """What an import or re-embed did; ``written + skipped_existing + invalid`` rows were read."""

    db_path: str
    table: str
    read: int = 0
    written: int = 0
    skipped_existing: int = 0
    invalid: int = 0
    vectors_reused: int = 0
    reembedded: int = 0
    dropped_columns: list[str] = []
    embedding: dict[str, str] = {}
    seconds: float = 0.0


# --- target tables ---------------------------------------------------------------------------------


def target_schema(template: pa.Schema | None, embedder: Embedder) -> pa.Schema:
    """A new table's schema: the template's columns and types (all nullable), the embedder's vector."""
    base = build_schema(embedder)
    if template is None:
        return base
    fields = []
    for field in template:
        if field.name == "vector":
            fields.append(base.field("vector"))
        else:
            fields.append(field.with_nullable(True))  # non-nullable columns break older writers' appends
    names = {f.name for f in fields}
    fields += [f for f in base if f.name not in names]
    metadata = dict(template.metadata or {})
    metadata.update(base.metadata or {})
    return pa.schema(fields, metadata=metadata)


def open_target(settings: Settings, embedder: Embedder, template: pa.Schema | None) -> Store:
    """Open the target table, creating it from ``template`` when missing; checks the embedder.

    Raises:
        EmbeddingModelMismatch: the existing target holds vectors of another model.
    """
    if settings.db_dir is not None:
        settings.db_dir.mkdir(parents=True, exist_ok=True)
    db = connection.connect(settings)
    if not connection.table_exists(db, settings.table):
        with connection.commit_lock(settings).hold():
            table_format.create(db, settings.table, target_schema(template, embedder), settings.storage_options)
    # No vector index: an import reads ids it just wrote itself, which an index would only learn in the
    # background (a thread still reading as the command exits).
    return Store.open(settings.model_copy(update={"vector_cache": False}), embedder)


def to_arrow(schema: pa.Schema, rows: list[dict[str, Any]]) -> pa.Table:
    """Rows in ``schema``'s exact types; a column a row lacks is null for that row."""
    arrays = []
    for field in schema:
        values = [row.get(field.name) for row in rows]
        if field.name == "vector" and pa.types.is_fixed_size_list(field.type):
            flat = np.concatenate([np.asarray(v, dtype=np.float32) for v in values])
            arrays.append(pa.FixedSizeListArray.from_arrays(pa.array(flat, type=field.type.value_type),
                                                            field.type.list_size))
        else:
            arrays.append(_column(values, field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def _column(values: list[Any], arrow_type: pa.DataType) -> pa.Array:
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        values = [base64.b64decode(v) if isinstance(v, str) else v for v in values]
    try:
        return pa.array(values, type=arrow_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        # JSON carries dates as ISO text and decimals as strings: let Arrow's cast parse them.
        return pa.array(values).cast(arrow_type)


def with_retry(operation: Callable[[], T]) -> T:
    delay = 0.05
    for attempt in range(1, MAX_ATTEMPTS + 1):
        try:
            return operation()
        except Exception as exc:
            # StoreBusy already waited lock_timeout_s for the lock: retrying would only multiply that wait.
            if attempt == MAX_ATTEMPTS or isinstance(exc, StoreBusy) or not is_retryable(exc):
                raise
            logger.info("retrying an import commit after %s (attempt %d)", type(exc).__name__, attempt)
        time.sleep(delay)  # in a worker thread: another writer's commit must land first
        delay = min(delay * 2, 1.0)
    raise AssertionError("unreachable")


def existing_ids(store: Store, ids: list[str]) -> set[str]:
    return {row["id"] for row in store.get_rows(ids, ["id"])} if ids else set()


def commit_new_rows(store: Store, rows: list[dict[str, Any]]) -> int:
    """Append the rows whose id is not in the table yet, under the cross-process lock; returns how many."""

    def commit() -> int:
        with store.lock.hold():
            present = existing_ids(store, [row["id"] for row in rows])  # re-checked inside the lock
            fresh = [row for row in rows if row["id"] not in present]
            if fresh:
                store.table.add(to_arrow(store.table.schema, fresh))
            return len(fresh)

    return with_retry(commit)


# --- embedding -------------------------------------------------------------------------------------


def _usable(vector: object, dimension: int) -> bool:
    if not isinstance(vector, list) or len(vector) != dimension:
        return False
    array = np.asarray(vector, dtype=np.float32)
    return bool(np.all(np.isfinite(array)) and np.linalg.norm(array) > 1e-6)


def _retag(metadata: object, model: str) -> object:
    """Keep a row's metadata truthful after re-embedding, touching only an existing ``embedding_model``."""
    if not isinstance(metadata, str):
        return metadata
    try:
        value = json.loads(metadata)
    except ValueError:
        return metadata
    if not isinstance(value, dict) or "embedding_model" not in value or value["embedding_model"] == model:
        return metadata
    value["embedding_model"] = model
    return json.dumps(value, ensure_ascii=False)


async def fill_vectors(embedder: Embedder, rows: list[dict[str, Any]], reuse: bool, report: TransferReport) -> None:
    """Give every row a vector: its own when reusable, else a fresh one (texts embedded in one batch)."""
    missing = [row for row in rows if not (reuse and _usable(row.get("vector"), embedder.dimension))]
    report.vectors_reused += len(rows) - len(missing)
    if not missing:
        return
    vectors = embedder.validate(await embedder.embed_documents([row.get("text") or "" for row in missing]),
                                len(missing))
    for row, vector in zip(missing, vectors, strict=True):
        row["vector"] = vector
        if "metadata" in row:
            row["metadata"] = _retag(row["metadata"], embedder.model)
    report.reembedded += len(missing)


async def write_batch(store: Store, embedder: Embedder, rows: list[dict[str, Any]], reuse: bool,
                      report: TransferReport) -> None:
    """Embed what needs it and append the rows the target lacks (idempotent, resumable)."""
    report.read += len(rows)
    present = await asyncio.to_thread(existing_ids, store, [row["id"] for row in rows])
    fresh = [row for row in rows if row["id"] not in present]
    if fresh:
        await fill_vectors(embedder, fresh, reuse, report)
        written = await asyncio.to_thread(commit_new_rows, store, fresh)
    else:
        written = 0
    report.written += written
    report.skipped_existing += len(rows) - written


async def finish(store: Store, batches: int, report: TransferReport, started: float) -> TransferReport:
    if batches >= COMPACT_AFTER_COMMITS and report.written:
        await asyncio.to_thread(store.optimize)
    report.seconds = time.monotonic() - started
    return report


# --- import ----------------------------------------------------------------------------------------


def parse_header(line: str | None) -> dict[str, Any]:
    """Raises: InvalidExport: the first line is not a memory-mcp export header."""
    try:
        header = json.loads(line) if line else None
    except ValueError:
        header = None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise InvalidExport("the file does not start with a memory-mcp export header (made by `memory-mcp export`)")
    if int(header.get("format_version", 0)) > FORMAT_VERSION:
        raise InvalidExport(f"export format {header['format_version']} is newer than this program ({FORMAT_VERSION})")
    return header


def header_schema(header: dict[str, Any]) -> pa.Schema | None:
    raw = header.get("arrow_schema")
    if not isinstance(raw, str):
        return None
    try:
        return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(raw)))
    except (ValueError, pa.ArrowInvalid) as exc:
        raise InvalidExport("the export header's arrow_schema is damaged") from exc


def valid_row(row: object) -> bool:
    if not isinstance(row, dict) or not isinstance(row.get("id"), str) or not row["id"]:
        return False
    try:
        filters.literal(row["id"])
    except InvalidInput:
        return False
    return True


def parse_rows(lines: Iterable[str], report: TransferReport, batch_size: int) -> Iterator[list[dict[str, Any]]]:
    """Batches of rows from JSONL; unparsable lines and rows without a usable id are counted, not fatal."""
    batch: list[dict[str, Any]] = []
    seen: set[str] = set()  # ids repeated inside the file: the first one wins
    for line in lines:
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            row = None
        if not valid_row(row) or row["id"] in seen:
            report.invalid += 1
            continue
        seen.add(row["id"])
        batch.append(row)
        if len(batch) >= batch_size:
            yield batch
            batch = []
    if batch:
        yield batch


def target_exists(settings: Settings) -> bool:
    if settings.db_dir is not None:
        return (settings.db_dir / f"{settings.table}.lance").is_dir()
    return connection.table_exists(connection.connect(settings), settings.table)


async def import_jsonl(lines: Iterable[str], settings: Settings, embedder: Embedder, *,
                       batch_size: int = DEFAULT_BATCH, progress: Progress | None = None,
                       vectors: Mode = "auto") -> TransferReport:
    """Add the exported rows that the table lacks; keep the vectors of the same model (or as ``vectors``
    says), embed the rest with ``embedder``: the one ``serve`` would use on the target (``import_vectors``).

    Raises:
        InvalidExport: not an export file. EmbeddingModelMismatch: the target holds another model.
        ModelChoiceNeeded: the export's vectors are another model's and ``vectors`` does not say what to do.
        EmbeddingError: the embedder failed (rows committed so far stay; re-running resumes).
    """
    started = time.monotonic()
    iterator = iter(lines)
    header = parse_header(next(iterator, None))
    template = header_schema(header)
    if await asyncio.to_thread(target_exists, settings):  # a table of another model is refused first
        store = await asyncio.to_thread(open_target, settings, embedder, template)
        reuse = keeps_vectors(header, embedder, vectors)
    else:  # decided before the new table is created: a refused import leaves nothing behind
        reuse = keeps_vectors(header, embedder, vectors)
        store = await asyncio.to_thread(open_target, settings, embedder, template)
    report = TransferReport(db_path=str(settings.db_path), table=settings.table, embedding=embedder.identity)
    known = set(store.table.schema.names)
    report.dropped_columns = [c for c in header.get("columns", []) if c not in known]
    total = header.get("rows") if isinstance(header.get("rows"), int) else None
    batches = 0
    for rows in parse_rows(iterator, report, batch_size):
        await write_batch(store, embedder, rows, reuse, report)
        batches += 1
        if progress:
            progress(report.read + report.invalid, total)
    return await finish(store, batches, report, started)
