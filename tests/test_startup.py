"""Start-up in the background: /healthz at once, MCP waits at the gate, REST gets 503, the model loads later."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import httpx
import pytest
from fastapi import FastAPI

from app.memory.service import MemoryService
from app.settings import Settings
from app.startup import Startup, StartupGate
from tests.conftest import SettingsFactory
from tests.mcp.clients import streamable_session
from tests.memory.embeddings.gated_model import GatedModel
from tests.reliability.support import server_env
from tests.support.server import LiveServer, free_port, run_server

SEED = "The staging database is rebuilt every night from the kiwi snapshot"
AT_ONCE_S = 3.0  # recall must not wait for the model; generous for a loaded 2-core box


@contextmanager
def server_with_loading_model(make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch,
                              **overrides: object) -> Iterator[tuple[LiveServer, GatedModel]]:
    """A live server whose model loads only when the test sets ``allow_load`` (set on the way out)."""
    model = GatedModel()
    monkeypatch.setattr("app.memory.service.create_embedder", lambda settings: model)
    try:
        with run_server(make_settings(**overrides), loaded=False) as server:
            _wait_open(server)  # REST answers 503 until the stores are open; the model loads after that
            try:
                yield server, model
            finally:
                model.allow_load.set()  # a model still loading would hold the shutdown
    finally:
        model.allow_load.set()


def _wait_open(server: LiveServer) -> None:
    startup: Startup = server.app.state.startup
    deadline = time.monotonic() + 30
    while not startup.is_open:
        assert time.monotonic() < deadline and startup.failure is None, startup.status()
        time.sleep(0.01)  # polling the server thread's start-up state, bounded by the deadline


def _wait_loaded(server: LiveServer) -> None:
    startup: Startup = server.app.state.startup
    assert startup.wait_loaded(30) and startup.failure is None


async def test_healthz_answers_while_the_model_loads_and_readyz_names_it(
        make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    with server_with_loading_model(make_settings, monkeypatch) as (server, model):
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
            assert (await http.get("/healthz")).json() == {"status": "ok"}
            stats = await http.get("/api/lancedb/stats")  # the store is open, the model still loading
            assert stats.status_code == 200 and stats.json()["total"] == 0
            loading = await http.get("/readyz")
            assert loading.status_code == 503 and loading.json()["status"] == "starting"
            assert "model" in loading.json()["loading"]  # and "vector_cache" while that loads too
            assert set(loading.json()["loading"]) <= {"model", "vector_cache"}
            assert loading.json()["memory"]["embedder"]["loading"] is True
            model.allow_load.set()
            await anyio.to_thread.run_sync(_wait_loaded, server)
            ready = await http.get("/readyz")
            assert ready.status_code == 200 and ready.json()["loading"] == []
            assert ready.json()["startup"]["state"] == "loaded"


async def test_recall_before_the_model_loads_answers_from_keywords_over_rest_and_mcp(
        make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = make_settings()
    seeded = GatedModel()
    seeded.allow_load.set()
    async with MemoryService.open(settings, seeded) as service:
        seed_id = (await service.remember(SEED)).memory_id
    await seeded.close()
    with server_with_loading_model(make_settings, monkeypatch) as (server, model):
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as http, streamable_session(server.url) as mcp:
            started = time.monotonic()
            found = await http.get("/api/lancedb/vector-search", params={"q": "kiwi snapshot"})
            rest_s = time.monotonic() - started
            started = time.monotonic()
            recalled = await mcp.call_tool("recall", {"query": "kiwi snapshot"})
            mcp_s = time.monotonic() - started
        assert found.headers["x-search-mode"] == "keyword_fallback" and [h["id"] for h in found.json()] == [seed_id]
        assert recalled.structured_content["mode"] == "keyword_fallback"  # type: ignore[index]
        assert [m["memory_id"] for m in recalled.structured_content["memories"]] == [seed_id]  # type: ignore[index]
        assert rest_s < AT_ONCE_S and mcp_s < AT_ONCE_S, (rest_s, mcp_s)
        assert model.encoded == []  # nothing waited for, or queued at, the loading model


async def test_remember_before_the_model_loads_waits_for_it_within_its_deadline(
        make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    with server_with_loading_model(make_settings, monkeypatch, embedding_deadline_s=1.0) as (server, model):
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
            started = time.monotonic()
            refused = await http.post("/api/lancedb/memories", json={"text": "too early"})
            assert refused.status_code == 503 and refused.json()["code"] == "embedding_unavailable"
            assert "still loading" in refused.json()["detail"] and time.monotonic() - started < 4.0
            assert (await http.get("/api/lancedb/stats")).json()["total"] == 0  # nothing was written
            model.embed_requested.clear()
            async with anyio.create_task_group() as group:
                answers: list[httpx.Response] = []

                async def remember() -> None:
                    answers.append(await http.post("/api/lancedb/memories", json={"text": "waits for the model"}))

                group.start_soon(remember)
                assert await anyio.to_thread.run_sync(model.embed_requested.wait, 10)
                model.allow_load.set()  # the remember is waiting: now the model arrives
            assert answers[0].status_code == 200, answers[0].text
            listed = await http.get("/api/lancedb/memories")
            assert [m["text"] for m in listed.json()] == ["waits for the model"]


@pytest.mark.slow
def test_a_start_that_fails_after_listening_exits_with_status_3_and_says_why(
        make_settings: SettingsFactory, tmp_path: Path) -> None:
    anyio.run(_create_table, make_settings())  # 256-d vectors of the hash embedder
    env = {**server_env(tmp_path), "MEMORY_MCP_EMBEDDING_DIMENSIONS": "64", "MEMORY_MCP_PORT": str(free_port()),
           "MEMORY_MCP_LOG_FORMAT": "text"}
    result = subprocess.run([sys.executable, "-m", "app.cli", "serve"], env=env, capture_output=True, timeout=120,
                            check=False)
    output = (result.stdout + result.stderr).decode()
    assert result.returncode == 3, output
    assert "memory-mcp cannot start: " in output and "vectors from two models cannot be compared" in output
    assert "Traceback" not in output


async def _create_table(settings: Settings) -> None:
    async with MemoryService.open(settings):
        pass


# --- the gate, on its own ------------------------------------------------------------------------


def _gated_app(startup: Startup, wait_s: float = 30.0) -> FastAPI:
    app = FastAPI()

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/work")
    async def work() -> dict[str, str]:
        return {"done": "yes"}

    @app.post("/mcp")
    async def mcp() -> dict[str, str]:
        return {"initialized": "yes"}

    app.add_middleware(StartupGate, startup=startup, wait_s=wait_s)
    return app


async def test_an_mcp_request_waits_at_the_gate_while_rest_gets_503_at_once_and_probes_pass() -> None:
    startup = Startup()
    transport = httpx.ASGITransport(app=_gated_app(startup))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        answers: list[httpx.Response] = []
        async with anyio.create_task_group() as group:
            group.start_soon(lambda: _append(answers, http.post("/mcp")))
            assert (await http.get("/healthz")).status_code == 200  # the probe does not wait
            rest = await http.get("/work")  # nor does REST: it is told to come back
            assert (rest.status_code, rest.json()["code"], rest.headers["retry-after"]) == (503, "starting", "1")
            await anyio.wait_all_tasks_blocked()
            assert answers == []  # the MCP request is still waiting at the gate
            startup.mark_open()
        assert answers[0].json() == {"initialized": "yes"}
        assert (await http.get("/work")).json() == {"done": "yes"}


async def test_the_gate_answers_503_when_the_start_takes_too_long_or_failed() -> None:
    startup = Startup()
    transport = httpx.ASGITransport(app=_gated_app(startup, wait_s=0.2))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        slow = await http.post("/mcp")
        assert (slow.status_code, slow.json()["code"], slow.headers["retry-after"]) == (503, "starting", "1")
        startup.mark_failed("the memory table holds vectors of another model")
        for failed in (await http.post("/mcp"), await http.get("/work")):
            assert (failed.status_code, failed.json()["code"]) == (503, "start_failed")
            assert "another model" in failed.json()["detail"]


async def _append(answers: list[httpx.Response], request: Awaitable[httpx.Response]) -> None:
    answers.append(await request)


def test_the_gate_opens_once_the_saved_index_is_mapped_so_recall_never_waits_for_it(
        make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """REST gets its quick 503 while the saved index is mapped; once open, recall answers from it."""
    from app.memory.embeddings.hashing import HashEmbedder
    from app.memory.store import saved_index
    from app.memory.store.table import Store
    from tests.memory.store.test_cache_sync import _rows

    monkeypatch.setattr(saved_index, "SAVE_MIN_ROWS", 0)
    settings = make_settings(embedding_dimensions=64)
    store = Store.open(settings, HashEmbedder(64))
    store.add(_rows(30, "global", 1))
    assert store.sync is not None
    store.sync.close()  # saves the index
    started, release = threading.Event(), threading.Event()
    restore = saved_index.SavedIndex.restore

    def slow_restore(self: saved_index.SavedIndex, dataset: object, current: int) -> object:
        started.set()
        assert release.wait(30)
        return restore(self, dataset, current)

    monkeypatch.setattr(saved_index.SavedIndex, "restore", slow_restore)
    with run_server(settings, loaded=False) as server:
        try:
            assert started.wait(30)
            startup: Startup = server.app.state.startup
            refused = httpx.get(server.url + "/api/lancedb/vector-search", params={"q": "memory"}, timeout=30)
            assert refused.status_code == 503 and refused.json()["code"] == "starting" and not startup.is_open
        finally:
            release.set()
        _wait_open(server)
        memory: MemoryService = server.app.state.services.memory
        assert memory.store.cache is not None and memory.store.cache.version is not None  # mapped before open
        assert memory.store.sync is not None and memory.store.sync.saved is not None
        assert memory.store.sync.saved.restores == 1
        found = httpx.get(server.url + "/api/lancedb/vector-search", params={"q": "memory 1-3"}, timeout=30)
        assert found.status_code == 200 and len(found.json()) == 5
