"""Fixtures every test tree shares: settings on temp dirs with the fast hash embedder."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from app.settings import Settings
from tests.support.postgres import kanban_db, postgres_server, postgres_url  # noqa: F401 - fixtures
from tests.support.server import LiveServer, run_server

SettingsFactory = Callable[..., Settings]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def make_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SettingsFactory:
    """Settings isolated from the developer's env and ~/.openclaw: temp dirs, hash embedder."""
    for name in list(__import__("os").environ):
        if name.startswith("MEMORY_MCP_") or name == "JINA_API_KEY":
            monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # no stray .env from the checkout

    def factory(**overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "db_path": tmp_path / "lancedb",
            "kanban_db": tmp_path / "kanban.sqlite3",
            "model_cache_dir": tmp_path / "model-cache",
            "embedding_provider": "hash",
            "log_format": "text",
        }
        values.update(overrides)
        return Settings(**values)

    return factory


@pytest.fixture
def settings(make_settings: SettingsFactory) -> Settings:
    return make_settings()


@pytest.fixture
def live_server(settings: Settings) -> Iterator[LiveServer]:
    """A real uvicorn on 127.0.0.1 serving the whole app with the hash embedder."""
    with run_server(settings) as server:
        yield server
