"""The filter builder is injection-proof: user values stay literals, against a real table."""

from __future__ import annotations

import ast
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.errors import InvalidInput
from app.memory.service import MemoryService
from app.memory.store import filters
from tests.conftest import SettingsFactory

PAYLOADS = [
    "x' OR '1'='1", "x' OR 1=1 --", "\\'", "''", "%", "_", "`", '"', ")", ";", "’", "a\\' OR 1=1 --", "'" * 10240,
]


@pytest.fixture
async def service(make_settings: SettingsFactory) -> AsyncIterator[MemoryService]:
    async with MemoryService.open(make_settings()) as opened:
        for i in range(3):
            await opened.remember(f"row {i}", tags=["t"], agent="a")
        await opened.writer.flush()  # into the table, where LanceDB evaluates the filters
        yield opened


def test_literal_doubles_quotes_and_refuses_control_characters() -> None:
    assert filters.literal("it's") == "'it''s'"
    assert filters.eq("scope", "x' OR '1'='1") == "scope = 'x'' OR ''1''=''1'"
    with pytest.raises(InvalidInput):
        filters.literal("nul\x00")


def test_like_patterns_escape_wildcards() -> None:
    assert filters.like_escape("100%_\\") == "100\\%\\_\\\\"


@pytest.mark.parametrize("payload", PAYLOADS)
async def test_injection_payloads_in_every_filter_match_nothing(service: MemoryService, payload: str) -> None:
    rows = service.store.scan(None, ["id", "scope", "category", "text", "metadata"]).to_pylist()
    for where in (filters.eq("scope", payload), filters.eq("id", payload), filters.has_tag(payload),
                  filters.eq("category", payload), filters.contains("text", payload), filters.tag(payload)):
        assert service.store.count(where) == 0, where
        assert not any(filters.matches(where, row) for row in rows), where  # as the journal's rows are filtered
    assert service.store.count() == len(rows) == 3


@pytest.mark.parametrize("payload", ["x' OR '1'='1", "x' OR 1=1 --", "a\\' OR 1=1 --"])
async def test_injection_through_the_service_matches_and_changes_nothing(service: MemoryService, payload: str) -> None:
    with pytest.raises(InvalidInput):
        await service.list_facts(agent=payload)
    with pytest.raises(InvalidInput):
        await service.recall("row", agent_filter=payload)
    with pytest.raises(InvalidInput):
        await service.forget(payload)
    with pytest.raises(InvalidInput):
        await service.get(payload)
    assert await service.list_facts(tag=payload) == []
    assert await service.list_memories(category=payload) == []
    assert await service.keyword_search(payload) == []
    await service.writer.flush()  # whatever was journaled reaches the table
    assert service.store.count() == 3


def test_no_where_or_delete_call_builds_a_string_inline() -> None:
    """Every filter passed to where()/delete()/update()/count_rows() comes from app.memory.store.filters."""
    offenders: list[str] = []
    root = Path(__file__).resolve().parents[3] / "app" / "memory"
    scanned = list(root.rglob("*.py"))
    assert len(scanned) > 20  # the check would pass vacuously on a wrong root
    for path in scanned:
        offenders += _inline_filters(path)
    assert offenders == []


def _inline_filters(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in {
            "where", "delete", "count_rows", "update"
        } and not (isinstance(node.func.value, ast.Name) and node.func.value.id == "np"):  # numpy's where
            args = [*node.args, *(k.value for k in node.keywords if k.arg in {"where", "filter"})]
            for arg in args:
                inline = isinstance(arg, ast.JoinedStr | ast.BinOp)
                if inline or (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
                    found.append(f"{path}:{node.lineno}")
    return found
