"""The exact vector index: an in-memory copy of the table's vectors that answers top-k exactly.

It knows nothing of LanceDB: the store loads it (``VectorCache.reload`` takes any table with
LanceDB's read API) and tells it about each commit (``apply_*``).
"""

from app.memory.index.exact_top import Query, with_cosines
from app.memory.index.search_batch import SearchBatcher
from app.memory.index.vector_cache import VectorCache

__all__ = ["Query", "SearchBatcher", "VectorCache", "with_cosines"]
