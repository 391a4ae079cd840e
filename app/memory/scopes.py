"""Scope rules: which scopes exist, and how an agent name becomes a scope.

``global`` is shared; ``agent:<name>`` is one agent's; ``project:``, ``user:`` and ``custom:`` are the
memory-lancedb-pro families. Where an AGENT is named (``agent``, ``agent_filter``, ``--agent``), a bare
name such as ``claude-code`` means ``agent:claude-code``. Where a SCOPE is named (``scope``,
``--scope``), it must be ``global`` or ``<family>:<name>``: a bare ``myproject`` is refused with the
accepted forms, since guessing its family would store it where nobody looks.
"""

from __future__ import annotations

import re

from app.memory.errors import InvalidScope

GLOBAL = "global"
AGENT_PREFIX = "agent:"
FAMILIES = ("agent", "project", "user", "custom")
_NAME = re.compile(r"^[A-Za-z0-9][\w.@/\-]{0,127}$")


def _check_name(name: str, original: str) -> str:
    if not _NAME.fullmatch(name):
        raise InvalidScope(
            f"invalid scope {original!r}: use 'global', an agent name such as 'claude-code' "
            "(stored as 'agent:claude-code'), or one of agent:/project:/user:/custom: followed by a "
            "name of letters, digits, '_', '-', '.', '@' or '/' (at most 128 characters)"
        )
    return name


def normalize_scope(value: str) -> str:
    """Canonical scope for a scope or agent name.

    Raises:
        InvalidScope: neither ``global``, a family scope, nor a valid agent name.
    """
    text = value.strip()
    if text == GLOBAL:
        return GLOBAL
    family, sep, name = text.partition(":")
    if not sep:
        return AGENT_PREFIX + _check_name(text, value)
    if family not in FAMILIES:
        raise InvalidScope(
            f"invalid scope {value!r}: the family {family!r} is unknown; use global or one of "
            + ", ".join(f"{f}:<name>" for f in FAMILIES)
        )
    return f"{family}:{_check_name(name, value)}"


def check_scope(value: str) -> str:
    """A scope as given by a caller: ``global`` or ``<family>:<name>``, never a bare name.

    Raises:
        InvalidScope: a bare name, an unknown family or a malformed name.
    """
    text = value.strip()
    if text != GLOBAL and ":" not in text:
        hint = f"'agent:{text}' or 'project:{text}'" if _NAME.fullmatch(text) else "e.g. 'project:<name>'"
        raise InvalidScope(
            f"invalid scope {value!r}: a scope is 'global' or <family>:<name> with family "
            + ", ".join(FAMILIES) + f"; did you mean {hint}? (an agent name goes in 'agent' instead)"
        )
    return normalize_scope(text)


def agent_scope(agent: str) -> str:
    """The private scope of an agent (``antigravity`` and ``agent:antigravity`` are the same).

    Raises:
        InvalidScope: not an agent name.
    """
    scope = normalize_scope(agent)
    if not scope.startswith(AGENT_PREFIX):
        raise InvalidScope(f"{agent!r} is not an agent name; expected e.g. 'claude-code' or 'agent:claude-code'")
    return scope


def agent_of(scope: str) -> str | None:
    """The agent a scope belongs to, if it is an agent scope."""
    return scope[len(AGENT_PREFIX):] if scope.startswith(AGENT_PREFIX) else None


def writable_scopes(caller: str | None, may_write_global: bool) -> frozenset[str] | None:
    """Scopes a caller may write; None means unrestricted (no per-agent identity)."""
    if caller is None:
        return None
    own = agent_scope(caller)
    return frozenset({own, GLOBAL}) if may_write_global else frozenset({own})
