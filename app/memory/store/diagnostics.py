"""Health checks of the memory store for ``memory-mcp doctor``: each says what is wrong and how to fix it.

Every check only reads: nothing is created, locked or rewritten (a server may be running); ``fix_lock``
is the one repair, asked for with ``doctor --fix``.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
from pydantic import BaseModel

from app.memory.embeddings.base import Embedder
from app.memory.errors import StoreBusy
from app.memory.store import connection, table_format
from app.memory.store.locks import LOCK_DIR_NAME, LOCK_TARGET_NAME, STALE_S, prepare_target
from app.memory.store.schema import REQUIRED_COLUMNS, recorded_identity, vector_dimension
from app.settings import Settings

Status = Literal["ok", "warn", "fail"]
#: The one table memory-lancedb-pro opens in its directory (its store's TABLE_NAME).
PLUGIN_TABLE = "memories"
#: More fragments than this make filtered searches slow (docs/performance.md, 'Compaction and tail merges').
FRAGMENTS_WARN = 100


class Check(BaseModel):
    name: str
    status: Status
    detail: str
    fix: str | None = None


def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _is_number(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t)


_COLUMN_TYPES = {
    "id": (_is_string, "string"), "text": (_is_string, "string"), "scope": (_is_string, "string"),
    "category": (_is_string, "string"), "metadata": (_is_string, "JSON string"),
    "importance": (pa.types.is_floating, "float"), "timestamp": (_is_number, "int64 or float (ms)"),
}


def check_db_path(db_path: Path | str) -> Check:
    if isinstance(db_path, str):  # object storage: whether it is reachable shows in the table check
        return Check(name="db_path", status="ok", detail=f"{db_path} is on object storage (team mode)")
    if db_path.is_dir():
        if os.access(db_path, os.W_OK | os.X_OK):
            return Check(name="db_path", status="ok", detail=f"{db_path} exists and is writable")
        return Check(name="db_path", status="fail", detail=f"{db_path} is not writable by this user",
                     fix=f"fix the permissions (chown/chmod {db_path}) or set MEMORY_MCP_DB_PATH")
    if db_path.exists():
        return Check(name="db_path", status="fail", detail=f"{db_path} exists but is not a directory",
                     fix="point MEMORY_MCP_DB_PATH (or --db) at a directory")
    parent = next((p for p in db_path.parents if p.exists()), None)
    if parent is not None and os.access(parent, os.W_OK | os.X_OK):
        return Check(name="db_path", status="ok", detail=f"{db_path} does not exist yet; the server creates it")
    return Check(name="db_path", status="fail", detail=f"{db_path} does not exist and cannot be created",
                 fix="create it, or set MEMORY_MCP_DB_PATH to a writable place")


def open_table(settings: Settings) -> tuple[Any | None, Check]:
    where = f"{settings.db_uri}/{settings.table}"
    if settings.db_dir is not None and not (settings.db_dir / f"{settings.table}.lance").exists():
        return None, Check(name="table", status="ok", detail=f"no table {settings.table!r} yet; created on first start")
    try:
        db = connection.connect(settings)
    except Exception as exc:  # noqa: BLE001 - doctor reports every failure
        return None, Check(name="table", status="fail", detail=f"{settings.db_uri} cannot be reached: "
                           f"{type(exc).__name__}: {_first_line(exc)}",
                           fix="check the bucket, MEMORY_MCP_STORAGE_OPTIONS and the provider's credentials "
                               "(AWS_*, GOOGLE_*, AZURE_*)")
    if settings.db_dir is None and not connection.table_exists(db, settings.table):
        return None, Check(name="table", status="ok", detail=f"no table {settings.table!r} yet; created on first start")
    try:
        table = db.open_table(settings.table)
        rows = table.count_rows()
    except Exception as exc:  # noqa: BLE001 - doctor reports every failure
        return None, Check(name="table", status="fail", detail=f"{where} does not open: {type(exc).__name__}: {exc}",
                           fix="restore the directory from a backup or an export (memory-mcp import)")
    return table, Check(name="table", status="ok", detail=f"{where} opens ({rows} rows, version {table.version})")


def check_schema(schema: pa.Schema) -> Check:
    problems = [f"missing column {name!r}" for name in REQUIRED_COLUMNS if name not in schema.names]
    for name, (accepts, wanted) in _COLUMN_TYPES.items():
        if name in schema.names and not accepts(schema.field(name).type):
            problems.append(f"{name} is {schema.field(name).type}, expected {wanted}")
    if "vector" in schema.names and vector_dimension(schema) is None:
        problems.append(f"vector is {schema.field('vector').type}, expected a fixed-size list of float32")
    if problems:
        return Check(name="schema", status="fail", detail="; ".join(problems),
                     fix="this is not a memory table: point MEMORY_MCP_DB_PATH / MEMORY_MCP_TABLE elsewhere")
    required = [f.name for f in schema if not f.nullable]
    extra = [n for n in schema.names if n not in REQUIRED_COLUMNS]
    detail = "all memory columns present" + (f"; extra columns kept as they are: {', '.join(extra)}" if extra else "")
    if required:
        return Check(name="schema", status="warn", detail=f"{detail}; non-nullable: {', '.join(required)}",
                     fix="older writers fail to append when a column they do not know is required")
    return Check(name="schema", status="ok", detail=detail)


def _reembed_hint(embedder: Embedder, recorded_provider: str | None) -> str:
    command = f"memory-mcp reembed --provider {embedder.name}"
    if recorded_provider == embedder.name:  # same provider, another size: say which one
        command += f" --dimensions {embedder.dimension}"
    return f"`{command}` and switch to the new table it prints"


def check_model(schema: pa.Schema, embedder: Embedder) -> Check:
    recorded = recorded_identity(schema)
    configured = f"{embedder.name}/{embedder.model} ({embedder.dimension}-d)"
    if recorded is None and embedder.settings_from_openclaw:
        return Check(name="embedding_model", status="ok",
                     detail=f"the table records no model, as memory-lancedb-pro's tables; openclaw.json names it: "
                            f"{configured}")
    if recorded is None:
        return Check(name="embedding_model", status="warn",
                     detail=f"the table records no model (a memory-lancedb-pro table); configured {configured}",
                     fix="make sure its vectors come from the configured model, or `memory-mcp reembed` them")
    table_model = f"{recorded.get('provider')}/{recorded.get('model')} ({recorded.get('dimension')}-d)"
    same = (recorded.get("provider"), recorded.get("model")) == (embedder.name, embedder.model)
    if same and recorded.get("dimension") == str(embedder.dimension):
        return Check(name="embedding_model", status="ok", detail=f"table and configuration both use {table_model}")
    return Check(
        name="embedding_model", status="fail",
        detail=f"the table's vectors come from {table_model} but the configured embedder is {configured}",
        fix=(f"either set MEMORY_MCP_EMBEDDING_PROVIDER={recorded.get('provider')} (and its model/dimensions) back, "
             f"or run {_reembed_hint(embedder, recorded.get('provider'))}"),
    )


def check_dimension(schema: pa.Schema, embedder: Embedder) -> Check:
    dimension = vector_dimension(schema)
    recorded = (recorded_identity(schema) or {}).get("provider")
    if dimension == embedder.dimension:
        return Check(name="vector_dimension", status="ok", detail=f"{dimension}-d vectors, as the embedder makes")
    return Check(name="vector_dimension", status="fail",
                 detail=f"the table holds {dimension}-d vectors, the embedder makes {embedder.dimension}-d",
                 fix=f"run {_reembed_hint(embedder, recorded)}, or configure the table's model again")


def check_lock(db_path: Path | str, now: float | None = None) -> Check:
    """The write lock shared with memory-lancedb-pro: its target file and the lock directory
    (``locks``), in proper-lockfile's terms."""
    if isinstance(db_path, str):
        return Check(name="write_lock", status="ok",
                     detail="object storage: no lock files; LanceDB's conditional puts order the writers")
    target, lock = db_path / LOCK_TARGET_NAME, db_path / LOCK_DIR_NAME
    if target.is_dir():
        return Check(name="write_lock", status="warn",
                     detail=f"{target} is a directory, the lock of an earlier memory-mcp; memory-lancedb-pro "
                            "expects an empty file there",
                     fix="`memory-mcp doctor --fix` (or the server's next start) replaces it once no writer holds it")
    try:
        age = (now or time.time()) - lock.stat().st_mtime
    except FileNotFoundError:
        state = "present" if target.is_file() else "not created yet (made by the first write)"
        return Check(name="write_lock", status="ok", detail=f"free; lock target {target} {state}")
    if age <= STALE_S:
        return Check(name="write_lock", status="ok",
                     detail=f"held by a live writer: {lock} refreshed {age:.1f} s ago")
    return Check(name="write_lock", status="warn",
                 detail=f"stale write lock {lock}: not refreshed for {age:.0f} s (> {STALE_S:.0f} s), its holder "
                        "stopped; the next writer takes it over",
                 fix="`memory-mcp doctor --fix` removes it now")


def fix_lock(db_path: Path | str, now: float | None = None) -> list[str]:
    """What is safe to fix in the lock files: a stale lock directory is removed, an earlier memory-mcp's
    lock directory at the target path becomes the target file. Returns one line per change."""
    if isinstance(db_path, str):
        return []
    done = []
    target, lock = db_path / LOCK_TARGET_NAME, db_path / LOCK_DIR_NAME
    with contextlib.suppress(FileNotFoundError):
        age = (now or time.time()) - lock.stat().st_mtime
        if age > STALE_S:
            os.rmdir(lock)
            done.append(f"removed the stale write lock {lock} ({age:.0f} s old)")
    if target.is_dir():
        try:
            prepare_target(db_path, time.monotonic())
            done.append(f"replaced the lock directory {target} by the lock file memory-lancedb-pro expects")
        except StoreBusy:
            done.append(f"left {target}: an earlier memory-mcp holds it right now")
    return done


def check_fragments(table: Any) -> Check:
    stats = table.stats()
    fragments = int(stats.get("fragment_stats", {}).get("num_fragments", 0))
    small = int(stats.get("fragment_stats", {}).get("num_small_fragments", 0))
    detail = f"{fragments} fragments ({small} small), {stats.get('total_bytes', 0)} bytes"
    if fragments > FRAGMENTS_WARN:
        return Check(name="fragments", status="warn", detail=detail + "; searches slow down without compaction",
                     fix="run `memory-mcp doctor --compact` (or let the server compact after its next writes)")
    return Check(name="fragments", status="ok", detail=detail)


#: A millisecond timestamp below this is before 1973: almost surely seconds written by another tool.
SECONDS_BELOW_MS = 100_000_000_000
ROW_BATCH = 4_096


#: Rows ``check_rows`` reads unless asked for all (``doctor --full``): reading every vector of a 100k-row
#: table took doctor past a minute on a loaded machine (docs/operations.md, 'doctor').
ROW_SAMPLE = 10_000


def check_rows(table: Any, sample: int | None = ROW_SAMPLE) -> Check:
    """Rows other writers may have left unusable: timestamps in seconds, vectors with no direction, ids
    stored twice (both copies stay searchable, but a change by id changes both).

    ``sample``: read only this many rows (the table's first); None reads every row."""
    in_seconds = unusable = rows = 0
    names = table.schema.names
    columns = [c for c in ("id", "timestamp", "vector") if c in names]
    if not columns:
        return Check(name="rows", status="ok", detail="no id, timestamp or vector column to check")
    seen: set[Any] = set()
    repeated: set[Any] = set()
    for batch in table.search().select(columns).limit(sample).to_batches(ROW_BATCH):
        rows += batch.num_rows
        if "id" in columns:
            for memory_id in batch.column("id").to_pylist():
                (repeated if memory_id in seen else seen).add(memory_id)
        if "timestamp" in columns:
            stamps = np.asarray(batch.column("timestamp").to_numpy(zero_copy_only=False), dtype=np.float64)
            in_seconds += int(np.count_nonzero((stamps > 0) & (stamps < SECONDS_BELOW_MS)))
        if "vector" in columns:
            vectors = batch.column("vector")
            flat = vectors.flatten().to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
            matrix = flat.reshape(len(vectors), -1) if len(vectors) else flat.reshape(0, 1)
            finite = np.all(np.isfinite(matrix), axis=1)
            norms = np.linalg.norm(np.where(np.isfinite(matrix), matrix, 0.0), axis=1)
            unusable += int(np.count_nonzero(~finite | (norms == 0))) + vectors.null_count
    problems = []
    if in_seconds:
        problems.append(f"{in_seconds} rows have a timestamp in seconds (the table uses milliseconds)")
    if unusable:
        problems.append(f"{unusable} rows have a zero, missing or non-finite vector (never found by recall)")
    if repeated:
        shown = ", ".join(sorted(str(i) for i in repeated)[:5]) + (", ..." if len(repeated) > 5 else "")
        problems.append(f"{len(repeated)} ids are stored more than once ({shown}); "
                        "every copy is found, and a change or delete by id applies to all of them")
    total = table.count_rows() if sample is not None else rows
    scope = f"{rows} rows" if rows >= total else f"the first {rows} of {total} rows (`doctor --full` reads all)"
    if not problems:
        return Check(name="rows", status="ok", detail=f"{scope}: ids unique, timestamps in ms, vectors usable")
    return Check(name="rows", status="warn", detail=f"{scope}: " + "; ".join(problems),
                 fix="fix the writer that made them (unique ids; timestamps in ms since the epoch; real embeddings), "
                     "then `memory-mcp export` and `memory-mcp import` the corrected rows, or `memory-mcp reembed`")


def check_table(settings: Settings, embedder: Embedder | None, *, full: bool = False) -> list[Check]:
    """Table, schema, model, dimension and fragment checks (the model ones need the embedder); ``full``:
    check every row, not a sample."""
    table, opened = open_table(settings)
    checks = [opened]
    if table is None:
        return checks
    schema: pa.Schema = table.schema
    checks.append(check_schema(schema))
    if embedder is not None:
        checks += [check_model(schema, embedder), check_dimension(schema, embedder)]
    checks += [check_format(settings), check_plugin(settings, schema), check_fragments(table)]
    try:
        checks.append(check_rows(table, None if full else ROW_SAMPLE))
    except (OSError, RuntimeError, ValueError) as exc:  # rows that cannot be read: said, not a traceback
        checks.append(Check(name="rows", status="fail", detail=f"the rows cannot be read: {_first_line(exc)}",
                            fix="memory-mcp repair"))
    return checks


def check_format(settings: Settings) -> Check:
    """Whether memory-lancedb-pro's LanceDB can read the table's file format (``table_format``)."""
    uri = f"{settings.db_uri}/{settings.table}.lance"
    version = table_format.storage_version(uri, settings.storage_options)
    if table_format.plugin_reads(version):
        return Check(name="file_format", status="ok", detail=f"Lance format {version}, which memory-lancedb-pro's "
                                                             "LanceDB reads")
    return Check(name="file_format", status="fail",
                 detail=f"Lance format {version}: memory-lancedb-pro's LanceDB 0.26 crashes reading it",
                 fix="`memory-mcp rewrite-table` rewrites it in format 2.0 in place (a backup is kept)")


def check_plugin(settings: Settings, schema: pa.Schema) -> Check:
    """Whether memory-lancedb-pro, as openclaw.json sets it up on this directory, would open the table: its
    table name, a Lance format its LanceDB reads, and the vector size it is configured for (its
    ``MemoryStore`` refuses any other: "Vector dimension mismatch")."""
    from app.memory.embeddings.openclaw import plugin_on_table
    from app.memory.embeddings.openclaw_config import PLUGIN_ID, OpenClawConfigError

    name = "openclaw_plugin"
    try:
        plugin = plugin_on_table(settings)
    except OpenClawConfigError as exc:
        return Check(name=name, status="warn", detail=f"cannot tell whether {PLUGIN_ID} opens the table: {exc.message}",
                     fix="correct openclaw.json")
    if plugin is None:
        where = settings.openclaw_config or "no openclaw.json (MEMORY_MCP_OPENCLAW_CONFIG)"
        return Check(name=name, status="ok", detail=f"{where} sets up no {PLUGIN_ID} on {settings.db_uri}")
    if settings.table != PLUGIN_TABLE:
        return Check(name=name, status="ok", detail=f"{PLUGIN_ID} opens the table {PLUGIN_TABLE!r} of "
                     f"{settings.db_uri}, not {settings.table!r}")
    version = table_format.storage_version(f"{settings.db_uri}/{settings.table}.lance", settings.storage_options)
    dimension = vector_dimension(schema)
    configured = f"openclaw.json configures {plugin.dimensions}-d vectors (model {plugin.model})"
    if not table_format.plugin_reads(version):
        return Check(name=name, status="fail", detail=f"{PLUGIN_ID} cannot read Lance format {version}",
                     fix="`memory-mcp rewrite-table`")
    if dimension != plugin.dimensions:
        return Check(name=name, status="fail",
                     detail=f"{PLUGIN_ID} refuses this table: it holds {dimension}-d vectors, {configured}",
                     fix=f"set the plugin's embedding (model, dimensions) in {plugin.config_path} to the table's, "
                         "or point its dbPath at a table made with its model (`memory-mcp import --reembed` there)")
    return Check(name=name, status="ok", detail=f"readable by {PLUGIN_ID}: Lance format {version}, {dimension}-d "
                                                f"vectors as {configured}")


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:300]


async def check_embedder(embedder: Embedder) -> Check:
    """Load the embedder and embed one query: a finite unit vector of the right size."""
    started = time.perf_counter()
    try:
        await embedder.load()
        vector = np.asarray(await embedder.embed_query("memory-mcp doctor: 記憶 check"), dtype=np.float32)
    except Exception as exc:  # noqa: BLE001 - doctor reports every failure
        return Check(name="embedder", status="fail", detail=f"{embedder.name} failed: {type(exc).__name__}: {exc}",
                     fix="install the provider's package / check its URL and key (MEMORY_MCP_EMBEDDING_*)")
    norm = float(np.linalg.norm(vector)) if vector.size else 0.0
    if vector.shape != (embedder.dimension,) or not np.all(np.isfinite(vector)) or abs(norm - 1.0) > 1e-3:
        return Check(name="embedder", status="fail",
                     detail=f"{embedder.name} returned shape {vector.shape}, norm {norm}",
                     fix="the provider returns unusable vectors; check MEMORY_MCP_EMBEDDING_MODEL / _DIMENSIONS")
    elapsed_ms = (time.perf_counter() - started) * 1000
    return Check(name="embedder", status="ok",
                 detail=f"{embedder.name}/{embedder.model} loads and embeds ({embedder.dimension}-d unit vector, "
                        f"{elapsed_ms:.0f} ms)")
