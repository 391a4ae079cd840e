"""CORS, off unless ``cors_origins`` lists origins: never ``*``, never reflected, never credentials."""

from __future__ import annotations

from app.edge.origins import Origin, origin_matches, parse_origin, parse_origin_list

_ALLOW_METHODS = b"GET, POST, PUT, PATCH, DELETE, OPTIONS"
_ALLOW_HEADERS = (
    b"Authorization, Content-Type, Accept, Last-Event-ID, Mcp-Session-Id, Mcp-Protocol-Version, X-Request-ID"
)
_EXPOSE_HEADERS = b"Mcp-Session-Id, X-Request-ID, WWW-Authenticate, Retry-After"
_MAX_AGE = b"600"

Header = tuple[bytes, bytes]


class CorsPolicy:
    """Adds CORS headers only for listed origins; ``Allow-Credentials`` is never sent (tokens, not cookies)."""

    def __init__(self, entries: list[str]) -> None:
        self._allowed: set[Origin] = parse_origin_list(entries, "MEMORY_MCP_CORS_ORIGINS")

    @property
    def enabled(self) -> bool:
        return bool(self._allowed)

    def listed(self, origin_header: str | None) -> bool:
        if not self._allowed or origin_header is None:
            return False
        parsed = parse_origin(origin_header)
        return parsed is not None and origin_matches(parsed, self._allowed)

    def response_headers(self, origin_header: str | None) -> list[Header]:
        """Headers for an ordinary response; the origin echoed is one that matched the list."""
        if not self.enabled:
            return []
        if origin_header is None or not self.listed(origin_header):
            return [(b"vary", b"Origin")]
        return [
            (b"access-control-allow-origin", origin_header.encode("latin-1")),
            (b"access-control-expose-headers", _EXPOSE_HEADERS),
            (b"vary", b"Origin"),
        ]

    def preflight_headers(self) -> list[Header]:
        return [
            (b"access-control-allow-methods", _ALLOW_METHODS),
            (b"access-control-allow-headers", _ALLOW_HEADERS),
            (b"access-control-max-age", _MAX_AGE),
        ]


def is_preflight(method: str, origin: str | None, request_method: str | None) -> bool:
    return method == "OPTIONS" and origin is not None and request_method is not None
