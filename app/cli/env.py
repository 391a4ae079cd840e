"""What every command reads from its environment, in the standard library only (the hooks import it)."""

from __future__ import annotations

import argparse
import ipaddress
import os
from collections.abc import Callable

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3

DEFAULT_URL = "http://127.0.0.1:3002"
SCOPE_FAMILIES = ("global", "agent:", "project:", "user:", "custom:")


def server_url(override: str | None = None) -> str:
    """Base URL of the server: ``--url``, else ``MEMORY_MCP_URL``, else the local default."""
    return (override or os.environ.get("MEMORY_MCP_URL") or DEFAULT_URL).rstrip("/")


def token_from_env() -> str | None:
    token = os.environ.get("MEMORY_MCP_TOKEN", "").strip()
    return token or None


def scope_for(agent: str | None, scope: str | None) -> str | None:
    """``--scope`` wins; an agent name becomes ``agent:<name>`` (``claude-code`` -> ``agent:claude-code``)."""
    if scope:
        return scope
    if not agent:
        return None
    agent = agent.strip()
    return agent if agent.startswith(SCOPE_FAMILIES) else f"agent:{agent}"


def integer(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse type for an integer in ``[minimum, maximum]``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from exc
        if value < minimum or (maximum is not None and value > maximum):
            bound = f"between {minimum} and {maximum}" if maximum is not None else f"at least {minimum}"
            raise argparse.ArgumentTypeError(f"must be {bound}")
        return value

    return parse


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
