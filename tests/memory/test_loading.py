"""Opened in the background, the service answers at once: searches use LanceDB until the vector cache has loaded."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from app.memory.service import MemoryService
from app.memory.store.cache_sync import CacheSync
from tests.conftest import SettingsFactory

TEXTS = [f"note {n}: the kiwi snapshot rebuilds staging {'nightly' if n % 2 else 'weekly'}" for n in range(40)]


@pytest.fixture
def held_cache_load(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """The vector cache's whole-table load waits until the returned event is set."""
    release = threading.Event()
    original = CacheSync._reload

    def held(self: CacheSync) -> None:
        if not release.wait(60):
            raise RuntimeError("the test never let the cache load")
        original(self)

    monkeypatch.setattr(CacheSync, "_reload", held)
    return release


async def _recalled(service: MemoryService) -> list[tuple[float, str]]:
    result = await service.recall("kiwi snapshot nightly", top_k=5)
    assert result.mode == "vector"
    return [(hit.score, hit.id) for hit in result.hits]


def _same_ranking(got: list[tuple[float, str]], expected: list[tuple[float, str]]) -> bool:
    """The same scores, and the same ids above the last one: the notes differ by their number alone, so
    nearly equal scores may swap by float rounding between LanceDB's scan and the cache."""
    if len(got) != len(expected) or any(abs(a - b) > 1e-5 for (a, _), (b, _) in zip(got, expected, strict=True)):
        return False
    floor = expected[-1][0] + 1e-5
    return {i for s, i in got if s > floor} == {i for s, i in expected if s > floor}


async def test_searches_use_lancedb_until_the_cache_loads_in_the_background_then_the_cache(
        make_settings: SettingsFactory, held_cache_load: threading.Event) -> None:
    settings = make_settings()
    held_cache_load.set()  # the first open loads the cache as before
    async with MemoryService.open(settings) as first:
        for text in TEXTS:
            await first.remember(text)
        expected = await _recalled(first)
    held_cache_load.clear()
    async with MemoryService.open(settings, background=True) as service:
        await service.embedding.wait_loaded()  # the hash embedder: at once
        assert service.store.cache is not None and service.store.cache.version is None
        health: dict[str, Any] = service.health()
        assert health["loading"] == ["vector_cache"] and health["ready"] is False
        assert _same_ranking(await _recalled(service), expected)  # LanceDB's exact scan answered
        assert service.store.cache.version is None
        held_cache_load.set()
        with anyio.fail_after(30):
            await service.loads.wait()
        assert service.store.cache.version == service.store.version()
        assert service.health()["loading"] == [] and service.health()["ready"] is True
        assert service.loads.times()["vector cache"] is not None
        searched = service.store.batcher.searches if service.store.batcher else -1
        assert _same_ranking(await _recalled(service), expected)
        assert service.store.batcher is not None and service.store.batcher.searches > searched  # the cache answered


# In a fresh interpreter: this one imported LanceDB long ago.
LAZY_CLIENT_CHECK = textwrap.dedent("""
    import sys
    from app.memory.loading import NAMESPACE_CLIENT, store_classes

    store_classes()
    import lancedb

    api = NAMESPACE_CLIENT + ".api.metadata_api"
    assert api not in sys.modules, "the REST client's API modules were imported"
    table = lancedb.connect(sys.argv[1]).create_table("t", [{"vector": [0.6, 0.8], "n": 1}])
    assert table.search([0.6, 0.8]).limit(1).to_list()[0]["n"] == 1
    assert api not in sys.modules
    import lance_namespace_urllib3_client as client
    if sys.argv[2] == "submodule first":
        from lance_namespace_urllib3_client.api.metadata_api import MetadataApi
        assert client.MetadataApi is MetadataApi and client.ApiClient.__name__ == "ApiClient"
    else:
        assert client.ApiClient.__name__ == "ApiClient"
        from lance_namespace_urllib3_client.api.metadata_api import MetadataApi
        assert client.MetadataApi is MetadataApi
    import lancedb.namespace
    print("whole client on first use")
""")


@pytest.mark.parametrize("order", ["submodule first", "name first"])
def test_lancedb_imports_without_the_rest_client_apis_and_the_client_is_whole_on_first_use(
        tmp_path: Path, order: str) -> None:
    result = subprocess.run([sys.executable, "-c", LAZY_CLIENT_CHECK, str(tmp_path / "db"), order],
                            capture_output=True, text=True, timeout=120, check=False,
                            cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "whole client on first use"
