"""Domain errors shared by every part of the service.

Tree::

    AppError                 code="error"
    ├── InvalidInput         bad arguments: REST 422, MCP tool error
    ├── NotFound             unknown id: REST 404
    ├── Conflict             lost a race or state does not allow it: REST 409
    ├── Forbidden            the caller may not do this: REST 403
    ├── PayloadTooLarge      request body over the limit: REST 413
    └── Unavailable          a dependency is down or the service is saturated: REST 503
        └── Busy             write queue full: REST 503 with Retry-After

Every error carries a stable snake_case ``code`` that clients can match on, and a message written
so that a model reading it knows what to do next. Adapters (REST, MCP) translate these; domain code
never builds HTTP responses.
"""

from __future__ import annotations


class AppError(Exception):
    """Base of every error the service reports to a client."""

    code: str = "error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        return self.message


class InvalidInput(AppError):
    code = "invalid_input"


class NotFound(AppError):
    code = "not_found"


class Conflict(AppError):
    code = "conflict"


class Forbidden(AppError):
    code = "forbidden"


class PayloadTooLarge(AppError):
    code = "payload_too_large"


class Unavailable(AppError):
    code = "unavailable"

    def __init__(self, message: str, *, code: str | None = None, retry_after_s: float | None = None) -> None:
        super().__init__(message, code=code)
        self.retry_after_s = retry_after_s


class Busy(Unavailable):
    code = "busy"
