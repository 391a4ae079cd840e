"""One place that turns domain errors into HTTP responses with a ``{detail, code}`` body."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from app.errors import AppError, Busy, Conflict, Forbidden, InvalidInput, NotFound, PayloadTooLarge, Unavailable

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


async def _validation_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)  # noqa: S101 - registered only for this type
    problems = []
    for err in exc.errors():
        where = ".".join(str(part) for part in err.get("loc", ()) if part != "body")
        problems.append(f"{where}: {err.get('msg', 'invalid')}" if where else str(err.get("msg", "invalid")))
    return JSONResponse({"detail": "; ".join(problems) or "invalid request", "code": "invalid_input"}, 422)


async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
    logger.exception("unhandled error", exc_info=exc)
    return JSONResponse({"detail": "internal error; see the server log", "code": "internal"}, status_code=500)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(AppError, _app_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(Exception, _unexpected)
