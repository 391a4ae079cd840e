"""Memories as text a model reads: the recall block of a query, and one memory in full.

Both use the hook's ``<memory_recall>`` format (``recall_block``), so a note reads the same whether the
hook, the MCP ``recall`` prompt or a ``memory://`` resource brought it.
"""

from __future__ import annotations

from datetime import UTC, datetime

from app.memory.models import Memory
from app.memory.recall_block import ONE_NOTE_PREAMBLE, format_recall, note
from app.memory.service import MemoryService

DEFAULT_TOP_K = 8
FULL_TEXT_CHARS = 8000  # a memory's text is at most 8,000 characters: a resource shows all of it


async def recall_text(service: MemoryService, query: str, *, scope: str | None = None,
                      top_k: int = DEFAULT_TOP_K) -> str:
    """The ``<memory_recall>`` block for ``query`` (as the hook prints it), or one line saying nothing matched.

    Raises:
        InvalidInput: an empty or too long query, or a malformed scope.
    """
    result = await service.recall(query, top_k, scope=scope)
    block = format_recall([hit.model_dump() for hit in result.hits])
    where = f" in scope {scope}" if scope else ""
    if not block:
        return f"memory-mcp holds no memory{where} that matches this query.\n"
    if result.mode == "keyword_fallback":
        block += "(The embedding model was unavailable: these notes were found by keywords only.)\n"
    return block


def memory_text(memory: Memory) -> str:
    """One memory with its tags, author, importance, dates and replacement links, as a spotlighted note."""
    extra = [
        ("tags", ", ".join(memory.tags)),
        ("agent", memory.agent),
        ("importance", f"{memory.importance:.2f}"),
        ("created", _iso(memory.timestamp)),
        ("supersedes", memory.supersedes),
        ("superseded_by", memory.superseded_by),
    ]
    element = note({"id": memory.id, "scope": memory.scope, "text": memory.text}, extra, limit=FULL_TEXT_CHARS)
    return "<memory_recall>\n" + ONE_NOTE_PREAMBLE + "\n" + element + "\n</memory_recall>\n"


def memory_title(memory: Memory, width: int = 80) -> str:
    """The first words of a memory on one line, for a list a person scans."""
    line = " ".join(memory.text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
