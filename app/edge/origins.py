"""Origin allow-list and the Fetch-Metadata fallback for browsers that omit Origin."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from app.edge.hosts import ANY_PORT, LOOPBACK_NAMES, parse_authority

_ORIGIN_RE = re.compile(r"^(?P<scheme>https?)://(?P<authority>[^/?#@\s]+)$")
_DEFAULT_PORTS = {"http": "80", "https": "443"}
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(frozen=True)
class Origin:
    """A normalised web origin; ``port`` is always explicit (scheme default filled in) or ``*``."""

    scheme: str
    name: str
    port: str


def parse_origin(value: str, *, config_entry: bool = False) -> Origin | None:
    """Parse ``scheme://host[:port]`` exactly (no path, no userinfo); None otherwise, ``null`` included.

    Configured entries may end in ``/`` and use a ``:*`` port; request headers may not.
    """
    text = value.strip().removesuffix("/") if config_entry else value
    match = _ORIGIN_RE.match(text.lower())
    if match is None:
        return None
    authority = parse_authority(match.group("authority"), allow_wildcard_port=config_entry)
    if authority is None:
        return None
    scheme = match.group("scheme")
    return Origin(scheme, authority.name, authority.port or _DEFAULT_PORTS[scheme])


def parse_origin_list(entries: Iterable[str], setting: str) -> set[Origin]:
    """Parse configured origins; a bad entry (or a bare ``*``) stops start-up with the setting's name."""
    origins: set[Origin] = set()
    for entry in entries:
        parsed = parse_origin(entry, config_entry=True)
        if parsed is None:
            raise ValueError(f"{setting}: {entry!r} is not an origin like http://host:port ('*' is never allowed)")
        origins.add(parsed)
    return origins


def origin_matches(origin: Origin, allowed: set[Origin]) -> bool:
    return origin in allowed or Origin(origin.scheme, origin.name, ANY_PORT) in allowed


class OriginPolicy:
    """Loopback origins on any port plus ``allowed_origins`` and ``cors_origins``."""

    def __init__(self, allowed: set[Origin]) -> None:
        self._allowed = set(allowed)
        for scheme in _DEFAULT_PORTS:
            self._allowed.update(Origin(scheme, name, ANY_PORT) for name in LOOPBACK_NAMES)

    def allows(self, origin_header: str) -> bool:
        parsed = parse_origin(origin_header)
        return parsed is not None and origin_matches(parsed, self._allowed)


def is_cross_site_without_origin(method: str, fetch_site: str | None, fetch_mode: str | None) -> bool:
    """A browser request from another site that carries no Origin: refuse all but plain navigations.

    Browsers omit Origin on no-cors GETs (``<img>``, ``<script>``) but always send Fetch Metadata;
    following a link to the dashboard (a top-level navigation) stays possible.
    """
    if (fetch_site or "").strip().lower() != "cross-site":
        return False
    return not (method in SAFE_METHODS and (fetch_mode or "").strip().lower() == "navigate")
