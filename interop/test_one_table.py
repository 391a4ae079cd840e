"""memory-mcp and memory-lancedb-pro's own store on one table: each reads, searches and changes the other's rows."""

from __future__ import annotations

from pathlib import Path

from interop.conftest import DIM, PluginFactory, Rest, ServerFactory, doc_vector, query_vector, wait_for
from tests.support.server import LiveServer

#: memory-lancedb-pro's storage categories (its MemoryEntry["category"]).
PLUGIN_CATEGORIES = {"preference", "fact", "decision", "entity", "reflection", "other"}


def test_plugin_reads_searches_updates_and_deletes_rows_memory_mcp_created(
    live: LiveServer, rest: Rest, db_path: Path, make_plugin: PluginFactory
) -> None:
    texts = ["the deploy runs on Fridays", "postgres listens on port 5433", "alice prefers tabs over spaces"]
    ids = [rest.remember(text, category="decision") for text in texts]
    rest.in_table()

    plugin = make_plugin()
    plugin.init(db_path, DIM)
    assert plugin.count() == len(texts)
    for memory_id, text in zip(ids, texts, strict=True):
        row = plugin.get(memory_id)
        assert row is not None, f"the plugin cannot read {memory_id}"
        assert row["text"] == text
        assert row["scope"] == "global"
        assert row["category"] in PLUGIN_CATEGORIES, row["category"]
    hits = plugin.vector_search(query_vector(texts[1]), limit=3)
    assert hits and hits[0]["entry"]["id"] == ids[1]
    assert plugin.stats()["totalCount"] == len(texts)

    new_text = "postgres listens on port 6543 since the upgrade"
    updated = plugin.update(ids[1], text=new_text, vector=doc_vector(new_text))
    assert updated is not None and updated["text"] == new_text
    wait_for(lambda: rest.get(ids[1]).json().get("text") == new_text, what="memory-mcp sees the plugin's update")
    assert wait_for(lambda: [h["id"] for h in rest.recall(new_text, limit=1)], what="recall")[0] == ids[1]

    assert plugin.delete(ids[0]) is True
    wait_for(lambda: rest.get(ids[0]).status_code == 404, what="memory-mcp sees the plugin's delete")
    wait_for(lambda: rest.stats()["total"] == len(texts) - 1, what="stats count the plugin's delete")
    assert ids[0] not in {h["id"] for h in rest.recall(texts[0], limit=5)}
    assert {row["id"] for row in rest.list()} == set(ids[1:])


def test_memory_mcp_serves_a_table_the_plugin_created(
    db_path: Path, make_plugin: PluginFactory, serve: ServerFactory
) -> None:
    plugin = make_plugin()
    plugin.init(db_path, DIM)
    texts = ["the cache warms at boot", "rotate the API keys every quarter"]
    plugin_ids = [plugin.store(text, doc_vector(text), category="fact")["id"] for text in texts]

    with serve() as rest:
        for memory_id, text in zip(plugin_ids, texts, strict=True):
            response = rest.get(memory_id)
            assert response.status_code == 200, response.text
            assert response.json()["text"] == text
        assert rest.recall(texts[1], limit=1)[0]["id"] == plugin_ids[1]

        mine = "the on-call rota lives in the wiki"
        my_id = rest.remember(mine, category="fact")
        row = wait_for(lambda: plugin.get(my_id), what="the plugin reads memory-mcp's row")
        assert row["text"] == mine
        assert plugin.vector_search(query_vector(mine), limit=1)[0]["entry"]["id"] == my_id
        assert plugin.count() == 3
        assert rest.stats()["total"] == 3
