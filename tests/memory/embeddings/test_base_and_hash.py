"""The Embedder contract's validation and the deterministic hash provider."""

from __future__ import annotations

import numpy as np
import pytest

from app.memory.embeddings.base import EmbeddingError
from app.memory.embeddings.hashing import HashEmbedder


async def test_hash_embedder_is_deterministic_and_unit_length() -> None:
    embedder = HashEmbedder(dimension=64)
    first = await embedder.embed_documents(["alpha beta", "記憶 毫秒", ""])
    second = await embedder.embed_documents(["alpha beta", "記憶 毫秒", ""])
    assert first.shape == (3, 64) and first.dtype == np.float32
    np.testing.assert_array_equal(first, second)
    np.testing.assert_allclose(np.linalg.norm(first, axis=1), 1.0, rtol=1e-5)
    query = await embedder.embed_query("alpha beta")
    assert query.shape == (64,)
    assert float(query @ first[0]) == pytest.approx(1.0, abs=1e-5)


async def test_hash_embedder_scores_overlapping_texts_higher() -> None:
    embedder = HashEmbedder()
    base, near, far = await embedder.embed_documents(["store timestamps in ms", "timestamps in ms", "purple giraffe"])
    assert base @ near > base @ far


def test_validate_normalises_rows_to_unit_length() -> None:
    embedder = HashEmbedder(dimension=3)
    out = embedder.validate(np.array([[3.0, 0.0, 4.0]]), 1)
    np.testing.assert_allclose(out, [[0.6, 0.0, 0.8]], rtol=1e-6)


@pytest.mark.parametrize(
    ("vectors", "rows", "fragment"),
    [
        ([[np.nan, 1.0, 0.0]], 1, "NaN"),
        ([[np.inf, 1.0, 0.0]], 1, "infinity"),
        ([[0.0, 0.0, 0.0]], 1, "zero vector"),
        ([[1.0, 0.0]], 1, "2-dimensional"),
        ([[1.0, 0.0, 0.0]], 2, "1 vectors for 2 texts"),
        ([["a", "b", "c"]], 1, "not a numeric array"),
    ],
)
def test_validate_rejects_unusable_vectors(vectors: list[list[object]], rows: int, fragment: str) -> None:
    embedder = HashEmbedder(dimension=3)
    with pytest.raises(EmbeddingError, match=fragment) as caught:
        embedder.validate(np.array(vectors), rows)
    assert caught.value.code == "embedding_unavailable"
    assert caught.value.reason == "invalid"
    assert "hash" in caught.value.message


def test_identity_names_provider_model_and_dimension() -> None:
    assert HashEmbedder(dimension=32).identity == {"provider": "hash", "model": "hash-bow-v1", "dimension": "32"}
