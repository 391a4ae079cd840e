"""Another OS process changing the memory table with LanceDB directly, as memory-lancedb-pro does:
no lock and no vector cache of ours, so the server learns of each change only from the table.

    python -m tests.memory.store.foreign_writer DB_PATH '[{"kind": "add", "rows": [...]}, ...]'
    python -m tests.memory.store.foreign_writer DB_PATH @ops.json       # the same, from a file

Kinds: add, delete, update, merge (merge_insert on id: matched rows updated, others inserted; rows
may carry a subset of the columns), optimize, add_column, alter_type.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import pyarrow as pa


def _arrow(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    """Rows in the table's types, with only the columns the rows carry."""
    fields = [f for f in schema if f.name in rows[0]]
    columns = []
    for field in fields:
        values = [r[field.name] for r in rows]
        if field.name == "vector":
            flat = pa.array(np.asarray(values, dtype=np.float32).ravel())
            columns.append(pa.FixedSizeListArray.from_arrays(flat, field.type.list_size))
        else:
            columns.append(pa.array(values, type=field.type))
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def run(table: Any, op: dict[str, Any]) -> None:
    kind = op["kind"]
    if kind == "add":
        table.add(_arrow(op["rows"], table.schema))
    elif kind == "delete":
        table.delete(op["where"])
    elif kind == "update":
        table.update(where=op["where"], values=op["values"])
    elif kind == "merge":
        merge = table.merge_insert("id").when_matched_update_all()
        merge.when_not_matched_insert_all().execute(_arrow(op["rows"], table.schema))
    elif kind == "optimize":
        table.optimize()
    elif kind == "add_column":
        table.add_columns({op["name"]: op["expression"]})
    elif kind == "alter_type":
        table.alter_columns({"path": op["name"], "data_type": pa.float32()})
    else:
        raise ValueError(f"unknown kind {kind}")


def main(db_path: str, ops: str) -> int:
    table = lancedb.connect(db_path).open_table("memories")
    for op in json.loads(Path(ops[1:]).read_text() if ops.startswith("@") else ops):
        run(table, op)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
