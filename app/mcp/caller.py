"""Who is calling: the principal a session is bound to, the agent a tool acts for, and what it may change."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.mcpserver import Context
from starlette.types import Scope

from app.edge.auth import require
from app.edge.leases import credential_of
from app.settings import PERMISSIONS, Permission

T = TypeVar("T")


def principal(scope: Scope) -> str | None:
    """The identity a session belongs to (see :func:`app.edge.leases.credential_of`)."""
    return credential_of(scope)


def bind_principal(scope: Scope) -> Scope:
    """Give the SDK transports a user to bind sessions to, so a session only answers the credential that opened it.

    Both SDK transports refuse a request for a session whose ``scope["user"]`` differs from the one
    that created it (the CVE-2026-52869 fix); the edge guard authenticates but sets no user.
    """
    identity = principal(scope)
    if identity is None:
        return scope
    token = AccessToken(token=identity, client_id=identity, scopes=[])
    return {**scope, "user": AuthenticatedUser(token)}


def caller_agent(ctx: Context) -> str | None:
    """The agent bound to the caller's token (per-agent identity), or None when identities are off."""
    request = ctx.request_context.request
    state = getattr(request, "state", None)
    agent = getattr(state, "agent", None)
    return agent if isinstance(agent, str) and agent else None


def caller_permissions(ctx: Context) -> frozenset[str]:
    """What the caller's token may change, as the edge guard found it; everything for an in-process client."""
    request = ctx.request_context.request
    if request is None:
        return PERMISSIONS  # no HTTP, so no token: the in-memory transport of tests and embedding code
    return frozenset(getattr(getattr(request, "state", None), "permissions", frozenset()))


def permitted(ctx: Context, needed: Permission, call: Callable[[], Awaitable[T]]) -> Callable[[], Awaitable[T]]:
    """``call``, refused as ``forbidden: ...`` before it starts when the caller's token lacks ``needed``."""
    granted, agent = caller_permissions(ctx), caller_agent(ctx)

    async def checked() -> T:
        require(granted, needed, agent)
        return await call()

    return checked
