"""Embedding providers: one interface, a registry by name."""

from app.memory.embeddings.base import Embedder, EmbeddingError
from app.memory.embeddings.registry import available, create_embedder, register

__all__ = ["Embedder", "EmbeddingError", "available", "create_embedder", "register"]
