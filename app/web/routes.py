"""The dashboard: one static page and its two assets, served with a strict Content-Security-Policy.

The page holds no data; it fetches everything from the REST API on the same origin, so the edge
guard's Host, Origin and token rules protect the data exactly as they protect every API client.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import Response

from app.errors import NotFound

STATIC_DIR = Path(__file__).parent / "static"

_JAVASCRIPT = "text/javascript; charset=utf-8"
# Only files listed here are served: no directory walking, no guessing of media types. The page's
# script is a set of ES modules; app/edge/auth.py's OPEN_PATHS lists the same files.
ASSETS: dict[str, str] = {
    "app.css": "text/css; charset=utf-8",
    "app.js": _JAVASCRIPT,
    "core.js": _JAVASCRIPT,
    "memories.js": _JAVASCRIPT,
    "board.js": _JAVASCRIPT,
    "taskform.js": _JAVASCRIPT,
    "live.js": _JAVASCRIPT,
}

# Memories and task descriptions are untrusted text written by agents. If one ever reached the DOM as
# markup, this policy still stops it from running: no inline script, no eval, nothing from another origin.
CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    ]
)

_SECURITY_HEADERS: dict[str, str] = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    # The assets change with the installed version; revalidating them is cheap on loopback.
    "Cache-Control": "no-cache",
}

router = APIRouter(include_in_schema=False)


@lru_cache(maxsize=8)
def _read(name: str) -> bytes:
    return (STATIC_DIR / name).read_bytes()


def _serve(name: str, media_type: str) -> Response:
    return Response(_read(name), media_type=media_type, headers=_SECURITY_HEADERS)


@router.get("/")
def index() -> Response:
    """The dashboard page."""
    return _serve("index.html", "text/html; charset=utf-8")


@router.get("/static/{name}")
def asset(name: str) -> Response:
    """The page's script modules and stylesheet.

    Raises:
        NotFound: the name is not one of the dashboard's assets.
    """
    media_type = ASSETS.get(name)
    if media_type is None:
        raise NotFound(f"no dashboard asset named {name!r}", code="asset_not_found")
    return _serve(name, media_type)
