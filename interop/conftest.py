"""Fixtures for the interop tests: a live memory-mcp and memory-lancedb-pro's own store, on one table."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.memory.embeddings.hashing import HashEmbedder
from app.settings import Settings
from interop.plugin import PluginDriver, plugin_install
from tests.support.server import LiveServer, run_server

#: Both programs size the vector column with it: memory-mcp's hash embedder, the plugin's ``vectorDim``.
DIM = 256
_HASH = HashEmbedder(DIM)
PluginFactory = Callable[[], PluginDriver]


def doc_vector(text: str) -> list[float]:
    """The vector memory-mcp stores for ``text`` (hash embedder), so the plugin can write the same."""
    return [float(x) for x in asyncio.run(_HASH.embed_documents([text]))[0]]


def query_vector(text: str) -> list[float]:
    return [float(x) for x in asyncio.run(_HASH.embed_query(text))]


def wait_for(condition: Callable[[], Any], timeout: float = 15.0, what: str = "condition",
             show: Callable[[], object] | None = None) -> Any:
    """Poll ``condition`` until it returns something truthy; another process's commit has no event to wait on.

    ``show`` says what was seen instead when the deadline passes."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            seen = show() if show is not None else value
            raise AssertionError(f"{what} not met within {timeout} s (saw: {seen!r})")
        time.sleep(0.05)


@pytest.fixture(scope="session")
def install() -> Path:
    return plugin_install()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "lancedb"


@pytest.fixture
def settings(tmp_path: Path, db_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """memory-mcp on ``db_path`` with the hash embedder, isolated from the developer's env and ~/.openclaw."""
    for name in list(os.environ):
        ours = name.startswith("MEMORY_MCP_") and not name.startswith("MEMORY_MCP_INTEROP_")
        if ours or name == "JINA_API_KEY":
            monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return Settings(db_path=db_path, kanban_db=tmp_path / "kanban.sqlite3", model_cache_dir=tmp_path / "models",
                    embedding_provider="hash", embedding_dimensions=DIM, log_format="text")


@pytest.fixture
def make_plugin(install: Path, tmp_path: Path) -> Iterator[PluginFactory]:
    """Start node drivers of the plugin's store; each is closed after the test."""
    drivers: list[PluginDriver] = []

    def factory() -> PluginDriver:
        driver = PluginDriver(install, stderr_path=tmp_path / f"plugin-{len(drivers)}.log")
        drivers.append(driver)
        return driver

    yield factory
    for driver in drivers:
        driver.close()


ServerFactory = Callable[[], AbstractContextManager["Rest"]]


@pytest.fixture
def serve(settings: Settings) -> ServerFactory:
    """Start memory-mcp on ``db_path`` later in a test (after the plugin made the table); yields its REST API."""

    @contextmanager
    def started() -> Iterator[Rest]:
        with run_server(settings) as server:
            client = Rest(server.url)
            try:
                yield client
            finally:
                client.client.close()

    return started


@pytest.fixture
def live(settings: Settings) -> Iterator[LiveServer]:
    with run_server(settings) as server:
        yield server


class Rest:
    """memory-mcp's REST API, as an agent uses it."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.client = httpx.Client(base_url=f"{url}/api/lancedb", timeout=60.0, trust_env=False)

    def in_table(self, within_s: float = 5.0) -> None:
        """Until memory-mcp's journal has flushed every acknowledged write into the table (the plugin reads the
        table: it sees our writes once they are there, within a couple of seconds)."""
        wait_for(lambda: self.client.get(f"{self.url}/readyz").json()["memory"]["journal"]["depth"] == 0,
                 timeout=within_s, what="memory-mcp's writes reach the table")

    def remember(self, text: str, category: str | None = None) -> str:
        body: dict[str, Any] = {"text": text}
        if category is not None:
            body["category"] = category
        response = self.client.post("/memories", json=body)
        assert response.status_code == 200, response.text  # noqa: S101
        return str(response.json()["id"])

    def get(self, memory_id: str) -> httpx.Response:
        return self.client.get(f"/memories/{memory_id}")

    def recall(self, text: str, limit: int = 5) -> list[dict[str, Any]]:
        response = self.client.get("/vector-search", params={"q": text, "limit": limit})
        assert response.status_code == 200, response.text  # noqa: S101
        hits: list[dict[str, Any]] = response.json()
        return hits

    def list(self, limit: int = 200) -> list[dict[str, Any]]:
        response = self.client.get("/memories", params={"limit": limit})
        assert response.status_code == 200, response.text  # noqa: S101
        rows: list[dict[str, Any]] = response.json()
        return rows

    def stats(self) -> dict[str, Any]:
        response = self.client.get("/stats")
        assert response.status_code == 200, response.text  # noqa: S101
        body: dict[str, Any] = response.json()
        return body


@pytest.fixture
def rest(live: LiveServer) -> Iterator[Rest]:
    client = Rest(live.url)
    yield client
    client.client.close()
