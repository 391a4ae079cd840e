"""While the vector index is still reading commits it has not seen (a restart catching up, another
writer's large change), recall answers from it at once and says so: ``X-Catching-Up`` over REST,
``catching_up`` in MCP's structured result, ``memory.index.catching_up`` in ``/readyz``."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from app.memory.rows import new_row
from app.memory.service import MemoryService
from tests.conftest import SettingsFactory
from tests.mcp.clients import streamable_session
from tests.memory.store.test_cache_sync import _foreign, _plain
from tests.rest.support import API, create_memory
from tests.support.server import LiveServer, run_server

FOREIGN = "the lighthouse keeper logs the tide at dawn"


def _foreign_row(service: MemoryService) -> dict[str, Any]:
    vector = asyncio.run(service.embedder.embed_documents([FOREIGN]))[0]
    return new_row(FOREIGN, vector, "global", [], 0.5, None, service.embedder.model)


async def _mcp_recall(server: LiveServer) -> dict[str, Any]:
    async with streamable_session(server.url) as client:
        found = await client.call_tool("recall", {"query": FOREIGN, "top_k": 3})
        assert not found.is_error, found
        return found.structured_content  # type: ignore[return-value]


def test_recall_answers_from_the_index_while_it_catches_up_and_says_so(make_settings: SettingsFactory) -> None:
    settings = make_settings(rank_lexical_weight=0.0)  # vector only: what the index holds is what is found
    with run_server(settings) as server, httpx.Client(base_url=server.url, timeout=30) as client, \
            httpx.Client(base_url=server.url + API, timeout=30) as rest:
        service: MemoryService = server.app.state.services.memory
        sync = service.store.sync
        assert sync is not None
        create_memory(rest, "the deploy key rotates monthly")
        asyncio.run(server.flush_memories())
        first = client.get(API + "/vector-search", params={"q": FOREIGN})
        assert first.status_code == 200 and first.headers["X-Catching-Up"] == "false"
        assert sync._busy.acquire(timeout=30)  # the index's catch-up cannot run: it stays behind the table
        try:
            _foreign(settings.db_path, {"kind": "add", "rows": _plain([_foreign_row(service)])})
            behind = client.get(API + "/vector-search", params={"q": FOREIGN})
            assert behind.status_code == 200 and behind.headers["X-Catching-Up"] == "true"
            assert FOREIGN not in [hit["text"] for hit in behind.json()]  # answered from the index as it was
            assert behind.json()[0]["text"] == "the deploy key rotates monthly"
            mcp = asyncio.run(_mcp_recall(server))
            assert mcp["catching_up"] is True and FOREIGN not in [m["content"] for m in mcp["memories"]]
            index = client.get("/readyz").json()["memory"]["index"]
            assert index["catching_up"] is True and index["rows"] == 1
        finally:
            sync._busy.release()
        assert sync.wait_idle(30)
        caught_up = client.get(API + "/vector-search", params={"q": FOREIGN})
        assert caught_up.headers["X-Catching-Up"] == "false" and caught_up.json()[0]["text"] == FOREIGN
        assert asyncio.run(_mcp_recall(server))["catching_up"] is False
        ready = client.get("/readyz").json()
        assert ready["memory"]["index"] == {**ready["memory"]["index"], "catching_up": False, "rows": 2}


def test_readyz_reports_anonymous_and_mapped_memory_apart(live_server: LiveServer) -> None:
    memory = httpx.get(live_server.url + "/readyz", timeout=30).json()["process_memory_mb"]
    assert set(memory) == {"anonymous", "mapped_files"} and memory["anonymous"] > 0 and memory["mapped_files"] > 0
