"""One place that turns domain errors into HTTP responses with a ``{detail, code}`` body."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from app.errors import AppError, Busy, Conflict, Forbidden, InvalidInput, NotFound, PayloadTooLarge, Unavailable
from app.rest.schema import document_edge_errors

logger = logging.getLogger(__name__)

_STATUS: list[tuple[type[AppError], int]] = [
    (NotFound, 404),
    (Conflict, 409),
    (Forbidden, 403),
    (PayloadTooLarge, 413),
    (InvalidInput, 422),
    (Busy, 503),
    (Unavailable, 503),
]


def status_for(error: AppError) -> int:
    for family, status in _STATUS:
        if isinstance(error, family):
            return status
    return 500


def error_response(error: AppError) -> JSONResponse:
    status = status_for(error)
    headers: dict[str, str] = {}
    if isinstance(error, Unavailable):
        headers["Retry-After"] = str(max(1, round(error.retry_after_s or 1)))
    return JSONResponse({"detail": error.message, "code": error.code}, status_code=status, headers=headers)


async def _app_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, AppError)  # noqa: S101 - registered only for AppError
    return error_response(exc)


# Fields whose bad values keep the code the domain check would give, whichever layer refuses first.
_FIELD_CODES = {
    "status": "invalid_status",
    "to_status": "invalid_status",
    "expected_status": "invalid_status",
    "title": "invalid_title",
}
# What Starlette's own refusals mean, as codes.
_HTTP_CODES = {400: "malformed_body", 404: "not_found", 405: "method_not_allowed"}


async def _validation_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)  # noqa: S101 - registered only for this type
    problems, codes = [], []
    for err in exc.errors():
        loc = [str(part) for part in err.get("loc", ())]
        where = ".".join(part for part in loc if part != "body")
        problems.append(f"{where}: {err.get('msg', 'invalid')}" if where else str(err.get("msg", "invalid")))
        field = loc[1] if len(loc) > 1 and loc[0] in ("body", "query", "path") else ""
        codes.append("invalid_input" if err.get("type") == "missing" else _FIELD_CODES.get(field, "invalid_input"))
    code = codes[0] if len(set(codes)) == 1 else "invalid_input"
    return JSONResponse({"detail": "; ".join(problems) or "invalid request", "code": code}, 422)


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def _allowed_methods(request: Request) -> str:
    """Every method some route serves at this path: the one route Starlette tried knows only its own."""
    allowed = []
    for method in _METHODS:
        probe = {"type": "http", "method": method, "path": request.scope["path"],
                 "root_path": request.scope.get("root_path", ""), "headers": []}
        if any(route.matches(probe)[0] is Match.FULL for route in request.app.router.routes):
            allowed.append(method)
    return ", ".join(allowed)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    """Starlette's refusals (unreadable body, no such route, wrong method) in the ``{detail, code}`` shape."""
    assert isinstance(exc, StarletteHTTPException)  # noqa: S101 - registered only for this type
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = _allowed_methods(request)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    return JSONResponse({"detail": str(exc.detail), "code": code}, status_code=exc.status_code, headers=headers)


async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
    logger.exception("unhandled error", exc_info=exc)
    return JSONResponse({"detail": "internal error; see the server log", "code": "internal"}, status_code=500)


def install_error_handlers(app: FastAPI) -> None:
    """The error contract: every refusal as ``{detail, code}``, and the schema documenting exactly that."""
    app.add_exception_handler(AppError, _app_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
    document_edge_errors(app)
