"""Host header allow-list: the DNS-rebinding defence (a rebound name arrives with its own Host)."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

# Exact grammar on purpose: anything with userinfo, a path, spaces or a second colon is refused, so
# `localhost:3002@evil` or `127.0.0.1.evil.example` can never be read as a loopback name.
_HOST_RE = re.compile(
    r"^(?P<name>[a-z0-9_](?:[a-z0-9_\-]*[a-z0-9_])?(?:\.[a-z0-9_](?:[a-z0-9_\-]*[a-z0-9_])?)*"
    r"|\[[0-9a-f:.]+\])(?::(?P<port>[0-9]{1,5}|\*))?$"
)
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "[::1]"})
# A wildcard bind address is not a name any legitimate client puts in Host; browsers that still
# route 0.0.0.0 to this machine are exactly the attack this list is for.
_UNSPECIFIED = frozenset({"0.0.0.0", "[::]"})
ANY_PORT = "*"


@dataclass(frozen=True)
class HostPort:
    """A parsed authority: lower-case name (IPv6 in brackets, compressed) and port text or None."""

    name: str
    port: str | None


def parse_authority(value: str, *, allow_wildcard_port: bool = False) -> HostPort | None:
    """Parse ``name[:port]`` exactly; None when the text is anything else."""
    match = _HOST_RE.match(value.strip().lower()) if value.isascii() else None
    if match is None:
        return None
    name, port = match.group("name"), match.group("port")
    if port == ANY_PORT and not allow_wildcard_port:
        return None
    if port not in (None, ANY_PORT) and int(port) > 65535:
        return None
    if name.startswith("["):
        try:
            name = f"[{ipaddress.IPv6Address(name[1:-1]).compressed}]"
        except ValueError:
            return None
    return HostPort(name, None if port is None else str(int(port)) if port != ANY_PORT else ANY_PORT)


def _bind_name(host: str) -> str:
    """The Host-header spelling of a bind address (IPv6 literals get brackets)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


class HostPolicy:
    """Loopback names on any port, plus configured entries (``name``, ``name:port``, ``name:*``)."""

    def __init__(self, entries: Iterable[str], bind_host: str | None = None) -> None:
        self._any_port: set[str] = set(LOOPBACK_NAMES)
        self._exact: set[HostPort] = set()
        for entry in entries:
            parsed = parse_authority(entry, allow_wildcard_port=True)
            if parsed is None:
                raise ValueError(f"MEMORY_MCP_ALLOWED_HOSTS: {entry!r} is not a host name or host:port")
            if parsed.port in (None, ANY_PORT):
                # A bare name means any port: behind Docker or a proxy the published port differs.
                self._any_port.add(parsed.name)
            else:
                self._exact.add(parsed)
        if bind_host:
            bound = parse_authority(_bind_name(bind_host))
            if bound is not None and bound.name not in _UNSPECIFIED:
                self._any_port.add(bound.name)

    def allows(self, host_header: str | None) -> bool:
        if not host_header:
            return False
        parsed = parse_authority(host_header)
        if parsed is None:
            return False
        return parsed.name in self._any_port or parsed in self._exact
