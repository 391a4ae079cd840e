"""Table layout shared with memory-lancedb-pro, and the embedding identity kept in its metadata.

The columns are memory-lancedb-pro's (OpenClaw writes the same directory), so the schema is a
contract: ``id`` (a UUID), ``text``, ``vector`` (fixed-size float32 list), ``scope``, ``category`` (one of
the plugin's storage categories, ``categories``), ``importance``, ``timestamp`` (milliseconds) and
``metadata`` (a JSON string; our tags live there).
Extra columns in an existing table are tolerated and never touched.
"""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa

from app.memory.embeddings.base import Embedder
from app.memory.errors import EmbeddingModelMismatch

logger = logging.getLogger(__name__)

EMBEDDING_METADATA_KEY = b"memory_mcp.embedding"
REQUIRED_COLUMNS = ("id", "text", "vector", "scope", "category", "importance", "timestamp", "metadata")
# Every column but the vector: what reads return (vectors are large and rarely needed).
ROW_COLUMNS = ("id", "text", "scope", "category", "importance", "timestamp", "metadata")


def build_schema(embedder: Embedder) -> pa.Schema:
    """The schema of a new table, with the embedder's identity in the schema metadata.

    Every column is nullable: a non-nullable column makes older writers' appends fail.
    """
    fields = [
        pa.field("id", pa.string()),
        pa.field("text", pa.string()),
        pa.field("vector", pa.list_(pa.float32(), embedder.dimension)),
        pa.field("scope", pa.string()),
        pa.field("category", pa.string()),
        pa.field("importance", pa.float64()),
        pa.field("timestamp", pa.int64()),
        pa.field("metadata", pa.string()),
    ]
    identity = json.dumps(embedder.identity, sort_keys=True).encode()
    return pa.schema(fields, metadata={EMBEDDING_METADATA_KEY: identity})


def recorded_identity(schema: pa.Schema) -> dict[str, str] | None:
    """The embedder identity stored in the table metadata, or None for a table we did not create."""
    raw = (schema.metadata or {}).get(EMBEDDING_METADATA_KEY)
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else None


def vector_dimension(schema: pa.Schema) -> int | None:
    """The fixed size of the vector column, or None when it is not a fixed-size list."""
    if "vector" not in schema.names:
        return None
    vector_type = schema.field("vector").type
    if pa.types.is_fixed_size_list(vector_type):
        return int(vector_type.list_size)
    return None


def _mismatch_message(where: Path, recorded: dict[str, str], embedder: Embedder) -> str:
    return (
        f"the memory table at {where} holds vectors from provider {recorded.get('provider', '?')!r} "
        f"model {recorded.get('model', '?')!r} ({recorded.get('dimension', '?')}-d), but the configured "
        f"embedder is provider {embedder.name!r} model {embedder.model!r} ({embedder.dimension}-d); "
        "vectors from two models cannot be compared. Fix: set MEMORY_MCP_EMBEDDING_PROVIDER (and "
        "MEMORY_MCP_EMBEDDING_MODEL) back to the table's model, or point MEMORY_MCP_DB_PATH / "
        "MEMORY_MCP_TABLE at a new table for the new model (and re-embed the memories into it)."
    )


def check_compatible(schema: pa.Schema, embedder: Embedder, where: Path | str) -> None:
    """Refuse to open a table whose vectors came from another model or dimension.

    Raises:
        EmbeddingModelMismatch: the recorded model or the vector dimension differs.
    """
    missing = [name for name in REQUIRED_COLUMNS if name not in schema.names]
    if missing:
        raise EmbeddingModelMismatch(
            f"the table at {where} is not a memory table (missing columns: {', '.join(missing)}); "
            "point MEMORY_MCP_DB_PATH / MEMORY_MCP_TABLE at a memory table or a new location"
        )
    recorded = recorded_identity(schema)
    dimension = vector_dimension(schema)
    if recorded is None:
        # A memory-lancedb-pro table: the model is unrecorded and we must not rewrite it; the
        # dimension is the one check we can make.
        if dimension is not None and dimension != embedder.dimension:
            unknown = {"provider": "unrecorded", "model": "unrecorded", "dimension": str(dimension)}
            raise EmbeddingModelMismatch(_mismatch_message(where, unknown, embedder))
        if embedder.settings_from_openclaw:  # the plugin's own settings name its model
            return
        logger.warning(
            "memory table at %s records no embedding model; assuming its %s-d vectors come from %s/%s",
            where, dimension, embedder.name, embedder.model,
        )
        return
    same_model = recorded.get("provider") == embedder.name and recorded.get("model") == embedder.model
    if not same_model or dimension != embedder.dimension:
        raise EmbeddingModelMismatch(_mismatch_message(where, recorded, embedder))


def new_id() -> str:
    """A random UUID, the form memory-lancedb-pro writes: unique across instances without coordination
    (122 random bits; the 8-character ids of earlier versions keep working)."""
    return str(uuid.uuid4())


def parse_metadata(raw: object) -> dict[str, Any]:
    """The metadata column is a JSON string; tolerate nulls and foreign junk."""
    if isinstance(raw, dict):
        return raw
    if not isinstance(raw, str) or not raw:
        return {}
    with contextlib.suppress(ValueError):
        value = json.loads(raw)
        if isinstance(value, dict):
            return value
    return {}
