"""memory-mcp's rows in memory-lancedb-pro's current format, judged by the plugin's own code: its upgrader counts
none as legacy, a supersede on either side hides the old row on the other, and a plugin table moved by
memory-mcp's export and import opens in the plugin's MemoryStore."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import pytest

from app.cli import main
from app.memory.embeddings import create_embedder
from app.memory.store import diagnostics
from app.memory.upgrade_rows import upgrade_rows
from app.settings import Settings
from interop.conftest import DIM, PluginFactory, Rest, doc_vector, query_vector, wait_for
from tests.memory.embeddings.fake_server import FakeEmbeddingServer, fake_embedding_server
from tests.support.openclaw import write_plugin_config
from tests.support.server import LiveServer

OLD = "the staging database listens on port 5433"
NEW = "the staging database listens on port 6543 since the upgrade"


def _ids(hits: list[dict[str, Any]]) -> set[str]:
    return {hit["entry"]["id"] if "entry" in hit else hit["id"] for hit in hits}


def test_the_plugins_upgrader_counts_none_of_memory_mcps_rows_as_legacy(
        live: LiveServer, rest: Rest, settings: Settings, db_path: Path, make_plugin: PluginFactory) -> None:
    written = {"deploys run on Fridays": ("decision", "events"), "alice prefers tabs": ("preference,team",
               "preferences"), "my name is Bob": ("profile", "profile"), "the cache warms at boot": (None, "patterns"),
               "postgres is the main database": ("entity", "entities")}
    ids = {text: rest.remember(text, category=category) for text, (category, _) in written.items()}
    replaced = rest.client.post("/memories", json={"text": "deploys run on Thursdays", "supersedes":
                                                   ids["deploys run on Fridays"]})
    assert replaced.status_code == 200, replaced.text
    rest.in_table()

    plugin = make_plugin()
    plugin.init(db_path, DIM)
    counted = plugin.upgrade_dry_run()
    assert (counted["total"], counted["legacy"], counted["totalLegacy"], counted["skipped"]) == (6, 0, 0, 6)
    for text, (_, smart) in written.items():
        meta = plugin.smart_metadata(ids[text])
        seen = {key: meta[key] for key in ("memory_category", "source", "tier", "state", "memory_layer", "l2_content")}
        assert seen == {"memory_category": smart, "source": "manual", "tier": "working", "state": "confirmed",
                        "memory_layer": "durable", "l2_content": text}, text
        assert meta["origin"] == "memory-mcp" and meta["valid_from"] == plugin.get(ids[text])["timestamp"]

    # Rows as earlier versions wrote them: the plugin counts them, `memory-mcp upgrade-rows` brings them over.
    table = lancedb.connect(str(db_path), read_consistency_interval=timedelta(0)).open_table("memories")
    for text in ("alice prefers tabs", "the cache warms at boot"):
        earlier = {"created": "2026-01-02T03:04:05.000Z", "tags": [], "agent": None, "source": "memory-mcp"}
        table.update(where=f"id = '{ids[text]}'", values={"metadata": json.dumps(earlier)})
    assert plugin.upgrade_dry_run()["totalLegacy"] == 2
    assert upgrade_rows(settings).upgraded == 2
    assert plugin.upgrade_dry_run()["totalLegacy"] == 0
    assert plugin.smart_metadata(ids["alice prefers tabs"])["source"] == "manual"


def test_superseding_in_memory_mcp_hides_the_old_row_from_the_plugins_retriever(
        live: LiveServer, rest: Rest, db_path: Path, make_plugin: PluginFactory) -> None:
    old = rest.remember(OLD)
    response = rest.client.post("/memories", json={"text": NEW, "supersedes": old})
    assert response.status_code == 200, response.text
    new = response.json()["id"]
    rest.in_table()

    plugin = make_plugin()
    plugin.init(db_path, DIM)
    vector = query_vector(OLD)
    assert _ids(plugin.vector_search(vector, limit=5)) == {old, new}  # both rows are there
    assert _ids(plugin.vector_search(vector, limit=5, exclude_inactive=True)) == {new}
    assert _ids(plugin.retrieve(OLD, vector, limit=5)) == {new}

    assert rest.client.delete(f"/memories/{new}").status_code == 200  # forgetting the replacement
    rest.in_table()
    assert _ids(plugin.retrieve(OLD, vector, limit=5)) == {old}


def test_superseding_in_the_plugin_hides_the_old_row_from_memory_mcp(
        live: LiveServer, rest: Rest, db_path: Path, make_plugin: PluginFactory) -> None:
    plugin = make_plugin()
    ours = rest.remember(OLD)
    plugin.init(db_path, DIM)
    theirs = plugin.store("the build server is host-7 in rack 3", doc_vector("the build server is host-7 in rack 3"))
    replacing = {
        ours: plugin.supersede(ours, NEW, doc_vector(NEW))["entry"]["id"],
        theirs["id"]: plugin.supersede(theirs["id"], "the build server moved to host-9",
                                       doc_vector("the build server moved to host-9"))["entry"]["id"],
    }

    for old, new in replacing.items():
        text = rest.get(old).json()["text"]
        wait_for(lambda text=text, old=old: old not in _ids(rest.recall(text, limit=5)),
                 what=f"recall hides {old}", show=lambda text=text: rest.recall(text, limit=5))
        assert new in _ids(rest.recall(text, limit=5))
        assert old not in {h["id"] for h in rest.client.get("/search", params={"q": text.split()[1]}).json()}
        shown = rest.client.get("/vector-search", params={"q": text, "include_superseded": "true"}).json()
        assert old in _ids(shown)
        listed = rest.get(old).json()
        assert listed["superseded_by"] == new and listed["invalidated_at"] > 0


@pytest.fixture
def fake() -> Iterator[FakeEmbeddingServer]:
    with fake_embedding_server(dimension=DIM) as server:
        yield server


def _point_plugin_at(config: Path, db: Path, fake: FakeEmbeddingServer) -> None:
    write_plugin_config(config, db, {"apiKey": "sk-interop-move", "model": "bge-m3", "baseURL": fake.url,
                                     "dimensions": DIM})


def test_a_plugin_table_exported_and_imported_by_memory_mcp_opens_in_the_plugins_store(
        settings: Settings, tmp_path: Path, make_plugin: PluginFactory, fake: FakeEmbeddingServer,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    source, target, config = tmp_path / "plugin", tmp_path / "moved", tmp_path / "openclaw.json"
    plugin = make_plugin()
    plugin.init(source, DIM)
    texts = ["the cache warms at boot", "rotate the API keys every quarter", "deploys run on Fridays"]
    stored = {plugin.store(text, doc_vector(text))["id"]: text for text in texts}
    _point_plugin_at(config, source, fake)
    monkeypatch.setenv("MEMORY_MCP_OPENCLAW_CONFIG", str(config))
    monkeypatch.setenv("MEMORY_MCP_KANBAN_DB", str(tmp_path / "kanban.sqlite3"))

    def cli(*words: str) -> tuple[int, str]:
        code = main(list(words))
        return code, capsys.readouterr().err

    assert cli("export", "--vectors", "--db", str(source), "--out", str(tmp_path / "plugin.jsonl"))[0] == 0
    code, said = cli("import", str(tmp_path / "plugin.jsonl"), "--db", str(target), "--provider", "hash",
                     "--dimensions", str(DIM))
    assert code == 1 and "openai/bge-m3 (256-d), named by openclaw.json" in said and not target.exists()

    _point_plugin_at(config, target, fake)  # OpenClaw moves to the new directory; memory-mcp follows it
    assert main(["import", str(tmp_path / "plugin.jsonl"), "--db", str(target), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["written"], report["vectors_reused"], report["reembedded"]) == (3, 3, 0)
    assert fake.state.requests == []  # no text was embedded again

    moved = make_plugin()
    moved.init(target, DIM)  # the plugin's MemoryStore opens it: no "Vector dimension mismatch"
    assert moved.count() == 3
    for memory_id, text in stored.items():
        row = moved.get(memory_id)
        assert row is not None and row["text"] == text
        np.testing.assert_allclose(row["vector"], doc_vector(text), atol=1e-6)
    assert moved.vector_search(query_vector(texts[1]), limit=1)[0]["entry"]["id"] == next(
        i for i, t in stored.items() if t == texts[1])
    target_settings = Settings(db_path=target, openclaw_config=config, kanban_db=tmp_path / "kanban.sqlite3")
    schema = lancedb.connect(str(target)).open_table("memories").schema
    check = diagnostics.check_plugin(target_settings, schema)
    assert check.status == "ok" and check.detail.startswith("readable by memory-lancedb-pro"), check
    assert {c.name: c.status for c in diagnostics.check_table(target_settings, create_embedder(target_settings))
            }["embedding_model"] == "ok"
