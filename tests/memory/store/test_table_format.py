"""Tables in a Lance format memory-lancedb-pro's LanceDB reads, and the rewrite of one it cannot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import lance
import lancedb
import numpy as np

from app.memory.embeddings.hashing import HashEmbedder
from app.memory.rows import new_row
from app.memory.store import diagnostics, table_format
from app.memory.store.locks import WriteLock
from app.memory.store.schema import build_schema
from app.memory.store.table import Store
from tests.conftest import SettingsFactory

REPO = Path(__file__).resolve().parents[3]


def _format(settings_db: Path) -> str:
    return str(lance.dataset(str(settings_db / "memories.lance")).data_storage_version)


def test_a_table_memory_mcp_creates_is_in_the_plugins_format(make_settings: SettingsFactory) -> None:
    settings = make_settings()
    Store.open(settings, HashEmbedder(), load_cache=False)
    assert _format(settings.db_path) == table_format.PLUGIN_FORMAT == "2.0"
    assert diagnostics.check_format(settings).status == "ok"


def _table_in_2_2(settings_db: Path, rows: int) -> list[dict[str, object]]:
    """A table as an earlier memory-mcp left it: LanceDB 0.40's default format, with an extra column."""
    embedder = HashEmbedder()
    schema = build_schema(embedder)
    db = lancedb.connect(str(settings_db))
    table = db.create_table("memories", schema=schema, storage_options={"new_table_data_storage_version": "2.2"})
    vectors = np.asarray([np.roll(np.eye(embedder.dimension, dtype=np.float32)[0], i) for i in range(rows)])
    written = [new_row(f"old memory {i}", vectors[i], "global", ["decision", "infra"], 0.5, "a", embedder.model)
               for i in range(rows)]
    table.add(written)
    table.add_columns({"flag": "'x'"})
    return written


def test_rewrite_turns_a_2_2_table_into_2_0_keeping_every_row_and_a_backup(make_settings: SettingsFactory) -> None:
    settings = make_settings()
    written = _table_in_2_2(settings.db_path, 50)
    before = lance.dataset(str(settings.db_path / "memories.lance"))
    assert diagnostics.check_format(settings).status == "fail"

    done = table_format.rewrite(str(settings.db_path / "memories.lance"), WriteLock(settings.db_path, 5),
                                settings.db_path)

    after = lance.dataset(str(settings.db_path / "memories.lance"))
    assert (done.before, done.after, done.rows) == ("2.2", "2.0", 50)
    assert str(after.data_storage_version) == "2.0" and after.version == before.version + 1
    assert after.schema.metadata == before.schema.metadata  # the embedding identity stays recorded
    rows = {r["id"]: r for r in after.to_table().to_pylist()}
    assert set(rows) == {r["id"] for r in written}
    for row in written:
        kept = rows[str(row["id"])]
        assert kept["metadata"] == row["metadata"] and kept["flag"] == "x"
        assert np.array_equal(np.asarray(kept["vector"], dtype=np.float32), np.asarray(row["vector"]))
    assert done.backup is not None and lance.dataset(str(done.backup)).count_rows() == 50
    assert diagnostics.check_format(settings).status == "ok"
    again = table_format.rewrite(str(settings.db_path / "memories.lance"), WriteLock(settings.db_path, 5), None)
    assert again.before == again.after == "2.0" and again.version == after.version  # nothing rewritten twice


def test_the_rewrite_table_command_says_what_it_did(make_settings: SettingsFactory, tmp_path: Path) -> None:
    settings = make_settings()
    _table_in_2_2(settings.db_path, 3)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "MEMORY_MCP_EMBEDDING_PROVIDER": "hash"}
    done = subprocess.run([sys.executable, "-m", "app.cli", "rewrite-table", "--db", str(settings.db_path), "--json"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["before"], report["after"], report["rows"]) == ("2.2", "2.0", 3)
    assert Path(report["backup"]).is_dir()
