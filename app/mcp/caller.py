"""Who is calling: the principal a session is bound to, and the agent a tool acts for."""

from __future__ import annotations

import hashlib
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.mcpserver import Context
from starlette.datastructures import Headers
from starlette.types import Scope


def principal(scope: Scope) -> str | None:
    """The identity a session belongs to: the edge guard's token id, else a digest of the credential, else nobody."""
    state: dict[str, Any] = scope.get("state") or {}
    token_id = state.get("token_id")
    if token_id:
        return f"token:{token_id}"
    authorization = Headers(scope=scope).get("authorization")
    if authorization:
        # A digest, so the credential itself is never kept next to the session.
        return "credential:" + hashlib.sha256(authorization.encode("latin-1")).hexdigest()[:32]
    return None


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
