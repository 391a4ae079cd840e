"""How one commit reaches the table: under the write lock, retried on Lance's transient conflicts, with
rows converted to the table's own Arrow schema.

No client waits for a commit: writes are acknowledged once the journal holds them, and the flusher
(``app/memory/journal/flusher.py``) retries a flush that failed at its next round.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

from app.errors import AppError
from app.memory.store.locks import CommitLock

logger = logging.getLogger(__name__)

T = TypeVar("T")
# Lance's own wording ("Retryable commit conflict for version N", "Commit conflict for version N", "Too many
# concurrent writers."), the same on a local disk and on object storage, where a commit is a conditional
# put; "precondition" is that put refused, should it ever surface untranslated. A refused commit wrote
# nothing, so retrying it never stores a row twice.
_RETRYABLE = ("too many concurrent writers", "commit conflict", "conflict", "retryable", "retry", "precondition")
MAX_ATTEMPTS = 8


def is_retryable(exc: BaseException) -> bool:
    """Lance's transient commit failures: another writer committed first; retrying is safe."""
    if isinstance(exc, AppError):  # our own errors (e.g. a lock timeout) already waited their budget
        return False
    message = str(exc).lower()
    return any(marker in message for marker in _RETRYABLE)


def locked_with_retry(lock: CommitLock, operation: Callable[[], T]) -> T:
    """Run ``operation`` holding ``lock``; retry transient conflicts with jittered backoff outside it."""
    delay = 0.02
    for attempt in range(1, MAX_ATTEMPTS + 1):
        try:
            with lock.hold():
                return operation()
        except Exception as exc:
            if attempt == MAX_ATTEMPTS or not is_retryable(exc):
                raise
            logger.info("retrying a LanceDB commit after %s (attempt %d)", type(exc).__name__, attempt)
        # Outside the lock, so the winner's commit can land.
        time.sleep(delay * random.uniform(0.5, 1.5))  # noqa: S311 - jitter, not security
        delay = min(delay * 2, 1.0)
    raise AssertionError("unreachable")


def to_arrow(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    """Rows in the table's own schema; extra (foreign) columns are null, types are the table's."""
    arrays = []
    for field in schema:
        if field.name == "vector" and pa.types.is_fixed_size_list(field.type):
            dimension = field.type.list_size
            flat = np.concatenate([np.asarray(r["vector"], dtype=np.float32) for r in rows])
            values = pa.array(flat, type=field.type.value_type)
            arrays.append(pa.FixedSizeListArray.from_arrays(values, dimension))
        elif field.name == "vector":
            arrays.append(pa.array([np.asarray(r["vector"]).tolist() for r in rows], type=field.type))
        elif all(field.name in r for r in rows):
            arrays.append(pa.array([r[field.name] for r in rows], type=field.type))
        else:
            arrays.append(_absent(field, len(rows)))
    return pa.Table.from_arrays(arrays, schema=schema)


def _absent(field: pa.Field, rows: int) -> pa.Array:
    """A column our rows do not have (another writer added it): null, or where the column refuses nulls
    (LanceDB makes ``add_columns`` columns non-nullable), the type's zero, so appends still succeed."""
    if field.nullable:
        return pa.nulls(rows, type=field.type)
    kind = field.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        zero: object = ""
    elif pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        zero = b""
    elif pa.types.is_boolean(kind):
        zero = False
    elif pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_timestamp(kind):
        zero = 0
    else:
        return pa.nulls(rows, type=kind)  # no zero to give: LanceDB's error names the column
    return pa.array([zero] * rows, type=kind)
