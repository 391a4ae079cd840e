"""Another process drops and recreates the table, then adds a column: memory-mcp keeps serving and writing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from interop.conftest import DIM, PluginFactory, Rest, doc_vector, wait_for
from tests.support.server import LiveServer


def _in_another_process(db_path: Path, code: str) -> str:
    """Run ``code`` with ``table`` (or ``db``) bound, in a separate Python process; returns its stdout."""
    script = f"import lancedb\ndb = lancedb.connect({str(db_path)!r})\n{code}\n"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _all_ids(db_path: Path) -> set[str]:
    code = "print('\\n'.join(db.open_table('memories').to_arrow().column('id').to_pylist()))"
    out = _in_another_process(db_path, code)
    return set(out.split())


def test_memory_mcp_survives_a_dropped_and_recreated_table_and_an_added_column(
    live: LiveServer, rest: Rest, db_path: Path, make_plugin: PluginFactory
) -> None:
    old = [rest.remember(f"from the first table, number {i}") for i in range(3)]
    assert len(rest.recall("from the first table", limit=5)) == 3
    # In the first table before it goes: writes still in the journal would go to the new one (never lost).
    rest.in_table()

    _in_another_process(db_path, "db.drop_table('memories')")
    plugin = make_plugin()
    plugin.init(db_path, DIM)  # the plugin creates a new table of the same name
    fresh_text = "the first row of the recreated table"
    fresh = plugin.store(fresh_text, doc_vector(fresh_text))["id"]

    listed = lambda: [row["id"] for row in rest.list()]  # noqa: E731
    wait_for(lambda: listed() == [fresh], what=f"memory-mcp lists the new table's row {fresh} only", show=listed)
    assert not {hit["id"] for hit in rest.recall("from the first table", limit=5)} & set(old)
    after_recreate = rest.remember("memory-mcp writes to the recreated table")
    assert _all_ids(db_path) == {fresh, after_recreate}, "a fresh reader sees exactly the new table's rows"
    assert plugin.get(after_recreate) is not None

    _in_another_process(db_path, "db.open_table('memories').add_columns({'flag': \"'x'\"})")
    after_column = rest.remember("memory-mcp writes after another program added a column")
    assert rest.recall("memory-mcp writes after another program added a column", limit=1)[0]["id"] == after_column
    assert _all_ids(db_path) == {fresh, after_recreate, after_column}
    assert plugin.get(after_column) is not None
    assert wait_for(lambda: rest.stats()["total"] == 3, what="stats count the new table")
