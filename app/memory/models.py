"""What the memory service returns: plain pydantic models shared by REST and MCP."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field


class Memory(BaseModel):
    """One stored memory, as read back from the table."""

    id: str
    text: str
    scope: str
    category: str = Field(description="memory-lancedb-pro's storage category: preference, fact, decision, entity, "
                          "reflection or other (the first tag that names one, else other).")
    tags: list[str]
    importance: float
    timestamp: int = Field(description="Creation time, milliseconds since the Unix epoch.")
    agent: str | None = Field(default=None, description="Agent that wrote it, when known.")
    metadata: dict[str, Any] = Field(default_factory=dict)
    supersedes: str | None = Field(default=None, description="Id of the older memory this one replaces.")
    superseded_by: str | None = Field(
        default=None,
        description="Id of the memory that replaced this one (recall hides it unless include_superseded); null "
        "when none did or the replacement was deleted.",
    )
    invalidated_at: int | None = Field(
        default=None,
        description="When it stopped being current, ms since the Unix epoch: replaced (here or in OpenClaw's "
        "memory-lancedb-pro) or retired by the plugin; recall hides it unless include_superseded. Null when current.",
    )


class MemoryHit(Memory):
    """A memory found by a search; a list of hits is ordered by ``score``, best first."""

    score: float = Field(
        description="The value the list is ordered by, 0 to 1, higher is better: the cosine similarity and "
        "keyword score fused by hybrid ranking (the similarity clipped to 0..1 when that is off), or the "
        "share of query terms found for keyword search."
    )
    similarity: float | None = Field(
        default=None,
        description="Cosine similarity of the memory's vector to the query's (1 - cosine distance, 1.0 = "
        "identical); null when no vector was compared (keyword search).",
    )
    duplicate_ids: list[str] = Field(
        default_factory=list,
        description="Ids of other memories with identical text in the same scope that this hit stands for "
        "in the list (nothing is deleted).",
    )


HINT_HELP = "Set when a near-duplicate says something else: how to mark it as replaced instead."


class DuplicateMatch(BaseModel):
    memory_id: str
    score: float
    hint: str | None = Field(default=None, description=HINT_HELP)


class RememberResult(BaseModel):
    ok: bool = True
    memory_id: str
    duplicate: DuplicateMatch | None = None


class SimilarMemory(BaseModel):
    memory_id: str
    content: str
    score: float


class DuplicateCheck(BaseModel):
    is_duplicate: bool
    threshold: float
    similar: list[SimilarMemory]
    hint: str | None = Field(default=None, description=HINT_HELP)


SearchMode = Literal["vector", "keyword_fallback"]


class RecallResult(BaseModel):
    """Hits best first; ``mode`` says whether the embedder was down and keyword search stood in."""

    hits: list[MemoryHit]
    mode: SearchMode = "vector"
    catching_up: bool = False  # the index was behind the table: memories written just before may be missing


class ScopeCount(BaseModel):
    scope: str
    count: int


class EmbeddingInfo(BaseModel):
    """The embedding model the table's vectors come from."""

    provider: str
    model: str
    dimension: int = Field(description="Length of every vector in the table.")


class Stats(BaseModel):
    total: int = Field(description="Memories in the table.")
    scopes: dict[str, int] = Field(description="Memories per scope.")
    categories: dict[str, int] = Field(
        description="Memories per storage category (memory-lancedb-pro's: preference, fact, decision, entity, "
        "reflection, other). Each key is a valid category filter of the memory list, which lists exactly that "
        "many memories."
    )
    embedding: EmbeddingInfo
    table_version: int | None = None
