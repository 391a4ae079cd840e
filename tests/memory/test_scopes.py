"""Scope normalisation rules from the contracts, as pure functions."""

from __future__ import annotations

import pytest

from app.memory.errors import InvalidScope
from app.memory.scopes import agent_of, agent_scope, check_scope, normalize_scope, writable_scopes


@pytest.mark.parametrize(("given", "expected"), [
    ("global", "global"), (" global ", "global"), ("claude-code", "agent:claude-code"),
    ("agent:claude-code", "agent:claude-code"), ("project:memory-mcp", "project:memory-mcp"),
    ("user:someone@example", "user:someone@example"), ("custom:a/b", "custom:a/b"),
])
def test_scopes_normalise(given: str, expected: str) -> None:
    assert normalize_scope(given) == expected


@pytest.mark.parametrize("bad", ["", " ", "team:x", "agent:", "agent:-x", "x y", "global:", "a:b:c", "agent:x'y"])
def test_unknown_or_malformed_scopes_are_refused(bad: str) -> None:
    with pytest.raises(InvalidScope):
        normalize_scope(bad)


def test_agent_scope_accepts_bare_and_prefixed_names_only() -> None:
    assert agent_scope("antigravity") == agent_scope("agent:antigravity") == "agent:antigravity"
    with pytest.raises(InvalidScope):
        agent_scope("project:x")
    assert agent_of("agent:x") == "x" and agent_of("global") is None


def test_writable_scopes_of_a_caller() -> None:
    assert writable_scopes(None, True) is None
    assert writable_scopes("a", True) == {"agent:a", "global"}
    assert writable_scopes("a", False) == {"agent:a"}


def test_a_scope_without_a_family_is_refused_naming_the_accepted_forms() -> None:
    with pytest.raises(InvalidScope) as refused:
        check_scope("myproject")
    message = refused.value.message
    assert "'agent:myproject' or 'project:myproject'" in message and "global" in message
    assert check_scope("project:myproject") == "project:myproject" and check_scope(" global ") == "global"
    assert agent_scope("myproject") == "agent:myproject"  # an agent name is still just a name
