"""Bearer-token check: constant-time, header only, token → agent binding and its permissions."""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
from dataclasses import dataclass

from app.errors import Forbidden
from app.settings import PERMISSIONS, Permission, Settings

# The dashboard shell holds no data (the same files in every install). A browser cannot send a bearer
# header when it opens a page, so the page loads openly and asks for the token for its API calls.
# The dashboard's files are app/web/routes.py's ASSETS (a test keeps the two lists equal).
OPEN_PATHS = frozenset({
    "/healthz", "/", "/static/app.css", "/static/app.js", "/static/core.js", "/static/memories.js",
    "/static/board.js", "/static/taskform.js", "/static/live.js",
})
# One space, one token of visible characters: a trailing space or a second word is a different token.
_BEARER_RE = re.compile(rb"^[Bb][Ee][Aa][Rr][Ee][Rr] ([\x21-\x7e]+)$")
MAIN_TOKEN_ID = "main"
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Caller:
    """Who the token says is calling (``agent`` None: the main token, or no auth) and what it may change."""

    agent: str | None
    token_id: str | None
    permissions: frozenset[str] = PERMISSIONS


# No auth configured (loopback dev mode), or an open path: everything is allowed, as before tokens had permissions.
ANONYMOUS = Caller(agent=None, token_id=None)

_ACTIONS: dict[Permission, str] = {
    "memory:write": "write memories",
    "board:write": "change the board",
    "jobs:trigger": "start jobs",
}


def require(granted: frozenset[str], needed: Permission, agent: str | None) -> None:
    """The one permission check, for REST and MCP alike; call it before anything is changed.

    Raises:
        Forbidden: code ``forbidden``, when the caller's token lacks ``needed``.
    """
    if needed not in granted:
        logger.info("refused %s to agent %r: its token does not allow it", needed, agent)
        raise Forbidden(
            f"this token may not {_ACTIONS[needed]}: its MEMORY_MCP_AGENT_TOKENS entry needs {needed!r} in 'allow'",
            code="forbidden",
        )


class TokenAuth:
    """Accepts ``Authorization: Bearer <token>`` for the main token or any agent token."""

    def __init__(self, settings: Settings) -> None:
        self._candidates: list[tuple[bytes, Caller]] = []
        for token, entry in settings.agent_tokens.items():
            # The id names the token, not just its agent: two tokens of one agent never share MCP sessions.
            token_id = f"agent:{entry.agent}:{hashlib.sha256(token.encode()).hexdigest()[:16]}"
            caller = Caller(agent=entry.agent, token_id=token_id, permissions=frozenset(entry.allow))
            self._candidates.append((token.encode(), caller))
        if settings.token is not None:
            # An empty configured token still turns auth on (fail closed); it just never matches.
            self._candidates.append((settings.token.get_secret_value().encode(), Caller(None, MAIN_TOKEN_ID)))
        self.enabled = bool(self._candidates)

    def is_open(self, path: str) -> bool:
        return not self.enabled or path in OPEN_PATHS

    def identify(self, authorization: list[bytes]) -> Caller | None:
        """The caller for these ``Authorization`` values, or None when they prove nothing."""
        if len(authorization) != 1:
            return None
        match = _BEARER_RE.match(authorization[0])
        if match is None:
            return None
        presented = match.group(1)
        found: Caller | None = None
        # Compare against every candidate, no early exit, so timing says nothing about which matched.
        for candidate, caller in self._candidates:
            if candidate and hmac.compare_digest(presented, candidate) and found is None:
                found = caller
        return found
