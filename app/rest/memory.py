"""Memory REST routes under ``/api/lancedb`` (the original agent monitor's shapes); one service call each."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from app.memory.models import DuplicateMatch, Memory, MemoryHit, Stats
from app.memory.validation import MAX_OFFSET, split_category
from app.rest.deps import MayWriteMemory, MemoryServiceDep
from app.rest.patterns import FILTER_VALUE_PATTERN, MEMORY_ID_PATTERN, MEMORY_TEXT_PATTERN, SCOPE_PATTERN
from app.rest.schema import CATEGORY_MARK, MAX_QUERY_CHARS, TEXT_LIMIT_MARK, errors

router = APIRouter(prefix="/api/lancedb", tags=["memory"])

SEARCH_MODE_HEADER = "X-Search-Mode"
CATCHING_UP_HEADER = "X-Catching-Up"
# Patterns are documented, not enforced here: the service's checks refuse with their own codes and messages.
# The text limit and the tag pattern come from settings; the schema builder fills them in.
_TEXT_SCHEMA = {"pattern": MEMORY_TEXT_PATTERN, TEXT_LIMIT_MARK: True}
_SCOPE_SCHEMA = {"pattern": SCOPE_PATTERN}
_SCOPE_HELP = "global, or agent:/project:/user:/custom: and a name (letters, digits, _ . @ / -)"
# Query strings share the request head with everything else (see MAX_QUERY_CHARS): each value is capped.
MAX_SCOPE_CHARS = 256
MAX_FILTER_CHARS = 1000
Limit = Annotated[int, Query(ge=1, le=100)]
PageLimit = Annotated[int, Query(ge=1, le=200)]
Offset = Annotated[int, Query(ge=0, le=MAX_OFFSET)]
Text = Annotated[str, Query(min_length=1, max_length=MAX_QUERY_CHARS, json_schema_extra=_TEXT_SCHEMA)]
ScopeFilter = Annotated[
    str | None, Query(max_length=MAX_SCOPE_CHARS, description=_SCOPE_HELP, json_schema_extra=_SCOPE_SCHEMA)
]
CategoryFilter = Annotated[
    str | None,
    Query(max_length=MAX_FILTER_CHARS, description="One tag, or the whole category when it holds commas.",
          json_schema_extra={"pattern": FILTER_VALUE_PATTERN}),
]
MemoryId = Annotated[str, Path(json_schema_extra={"pattern": MEMORY_ID_PATTERN})]
IncludeSuperseded = Annotated[
    bool, Query(description="Also list memories a newer one replaced (each names it in superseded_by).")
]


class SearchHit(BaseModel):
    """A search result; lists are ordered by ``score``, best first, and hold each text of a scope once."""

    id: str
    text: str
    scope: str
    category: str = Field(description="memory-lancedb-pro's storage category: preference, fact, decision, entity, "
                          "reflection or other.")
    tags: list[str]
    importance: float
    timestamp: int
    score: float = Field(
        description="What the list is ordered by, 0 to 1: cosine similarity and keyword score combined "
        "(vector search), or the share of query terms found (keyword search)."
    )
    similarity: float | None = Field(
        description="Cosine similarity to the query, 1 - cosine distance (1.0 = identical); null for keyword "
        "search and when vector search fell back to keywords."
    )
    duplicate_ids: list[str] = Field(
        description="Ids of other memories with identical text in the same scope, listed once as this hit."
    )
    supersedes: str | None = Field(description="Id of the older memory this one replaces.")
    superseded_by: str | None = Field(description="Id of the memory that replaced this one; null when current.")
    invalidated_at: int | None = Field(description="When it stopped being current (ms): replaced, or retired by "
                                       "OpenClaw's memory-lancedb-pro; null when current.")

    @classmethod
    def of(cls, hit: MemoryHit) -> SearchHit:
        return cls(id=hit.id, text=hit.text, scope=hit.scope, category=hit.category, tags=hit.tags,
                   importance=hit.importance,
                   timestamp=hit.timestamp, score=hit.score, similarity=hit.similarity,
                   duplicate_ids=hit.duplicate_ids, supersedes=hit.supersedes, superseded_by=hit.superseded_by,
                   invalidated_at=hit.invalidated_at)


TextField = Annotated[str, Field(min_length=1, json_schema_extra=_TEXT_SCHEMA)]
ScopeField = Annotated[
    str,
    Field(max_length=MAX_SCOPE_CHARS, description=f"{_SCOPE_HELP}; default global", json_schema_extra=_SCOPE_SCHEMA),
]
Category = Annotated[
    str, Field(description="A category (preference, fact, decision, entity, reflection, other) or tags joined by "
               "commas: every part is kept as a tag, the first that names a category sets it (else other).",
               json_schema_extra={CATEGORY_MARK: True})
]
Importance = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]


class MemoryCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    text: TextField
    scope: ScopeField | None = None
    category: Category | None = None
    importance: Importance | None = None
    supersedes: Annotated[
        str | None,
        Field(description="Id of the older memory this one replaces (you must be allowed to change it); recall "
              "then hides that one.", json_schema_extra={"pattern": MEMORY_ID_PATTERN}),
    ] = None


class MemoryPatch(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    text: TextField | None = None
    scope: ScopeField | None = None
    category: Category | None = None
    importance: Importance | None = None


class Created(BaseModel):
    ok: bool = True
    id: str
    duplicate: DuplicateMatch | None = None


class Deleted(BaseModel):
    ok: bool = True


def _caller(request: Request) -> str | None:
    """The agent bound to the caller's token by the edge guard (None: no per-agent identity)."""
    return getattr(request.state, "agent", None)


@router.get("/vector-search", response_model=list[SearchHit], responses=errors(422))
async def vector_search(service: MemoryServiceDep, response: Response, q: Text, scope: ScopeFilter = None,
                        limit: Limit = 5, include_superseded: IncludeSuperseded = False) -> list[SearchHit]:
    """Search by meaning, best ``score`` first, each hit with its cosine ``similarity`` and the ``duplicate_ids``
    of identical texts it stands for; header ``X-Search-Mode: keyword_fallback`` when the embedder was down,
    ``X-Catching-Up: true`` while the index is still reading recent changes (newest memories may be missing)."""
    result = await service.recall(q, top_k=limit, scope=scope, include_superseded=include_superseded)
    response.headers[SEARCH_MODE_HEADER] = result.mode
    response.headers[CATCHING_UP_HEADER] = "true" if result.catching_up else "false"
    return [SearchHit.of(hit) for hit in result.hits]


@router.get("/search", response_model=list[SearchHit], responses=errors(422))
async def keyword_search(service: MemoryServiceDep, q: Text, scope: ScopeFilter = None, limit: Limit = 20,
                         include_superseded: IncludeSuperseded = False) -> list[SearchHit]:
    """Keyword (substring) search: finds Chinese words and exact identifiers; ``score`` is the share of terms found."""
    hits = await service.keyword_search(q, scope=scope, limit=limit, include_superseded=include_superseded)
    return [SearchHit.of(hit) for hit in hits]


@router.get("/memories", response_model=list[Memory], responses=errors(422))
async def list_memories(service: MemoryServiceDep, scope: ScopeFilter = None, category: CategoryFilter = None,
                        limit: PageLimit = 30, offset: Offset = 0) -> list[Memory]:
    """Memories newest first, paginated, superseded ones included (with their ``superseded_by``)."""
    return await service.list_memories(scope=scope, category=category, limit=limit, offset=offset)


@router.get("/memories/{memory_id}", response_model=Memory, responses=errors(404, 422))
async def get_memory(service: MemoryServiceDep, memory_id: MemoryId) -> Memory:
    return await service.get(memory_id)


@router.post("/memories", response_model=Created, responses=errors(403, 404, 409, 422, 503),
             dependencies=[MayWriteMemory])
async def create_memory(service: MemoryServiceDep, request: Request, body: MemoryCreate) -> Created:
    """Embed and store a memory; a near-duplicate is reported in ``duplicate`` but still stored. With
    ``supersedes``: 404 if that memory does not exist, 409 if a newer one already replaced it."""
    result = await service.create(body.text, scope=body.scope, category=body.category,
                                  importance=body.importance, caller=_caller(request), supersedes=body.supersedes)
    return Created(id=result.memory_id, duplicate=result.duplicate)


@router.patch("/memories/{memory_id}", response_model=Memory, responses=errors(403, 404, 422, 503),
              dependencies=[MayWriteMemory])
async def update_memory(service: MemoryServiceDep, request: Request, memory_id: MemoryId,
                        body: MemoryPatch) -> Memory:
    """Change text (re-embeds), scope, category or importance (the vector is kept)."""
    return await service.update(memory_id, text=body.text, tags=split_category(body.category),
                                importance=body.importance, scope=body.scope, caller=_caller(request))


@router.delete("/memories/{memory_id}", response_model=Deleted, responses=errors(403, 404, 422, 503),
               dependencies=[MayWriteMemory])
async def delete_memory(service: MemoryServiceDep, request: Request, memory_id: MemoryId) -> Deleted:
    await service.forget(memory_id, caller=_caller(request))
    return Deleted()


@router.get("/stats", response_model=Stats)
async def stats(service: MemoryServiceDep) -> Stats:
    """Counts per scope and per tag (a memory tagged a,b counts for both), and the table's embedding model."""
    return await service.stats()
