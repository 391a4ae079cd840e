"""Fixtures of the embedding-provider tests."""

from tests.memory.embeddings.remote_support import fake, make_remote

__all__ = ["fake", "make_remote"]
