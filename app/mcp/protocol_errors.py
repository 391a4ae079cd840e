"""Domain errors as JSON-RPC errors for the methods that are not tool calls (prompts, resources, completion).

A tool answers a failure in its result (``results.py``); ``prompts/get`` and ``resources/read`` can only
answer a JSON-RPC error. The message keeps the ``code: message`` form of tool errors, so a model reads
the same words; the number is the one the specification names: -32002 for a resource that does not
exist, -32602 for bad arguments, -32603 for the server's own trouble.
"""

from __future__ import annotations

import logging

from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS

from app.errors import AppError, InvalidInput, NotFound

logger = logging.getLogger(__name__)

RESOURCE_NOT_FOUND = -32002
INTERNAL_ERROR_TEXT = "internal_error: the server could not answer; the details are in the server log"


def invalid(code: str, message: str) -> MCPError:
    return MCPError(code=INVALID_PARAMS, message=f"{code}: {message}")


def from_app_error(exc: AppError, *, uri: str | None = None) -> MCPError:
    """``exc`` as the error a client of ``prompts/get`` or ``resources/read`` (``uri``) should see."""
    text = f"{exc.code}: {exc.message}"
    if isinstance(exc, NotFound):
        return MCPError(code=RESOURCE_NOT_FOUND if uri is not None else INVALID_PARAMS, message=text,
                        data={"uri": uri} if uri is not None else None)
    if isinstance(exc, InvalidInput):
        return MCPError(code=INVALID_PARAMS, message=text)
    return MCPError(code=INTERNAL_ERROR, message=text)


def crashed(what: str) -> MCPError:
    """A generic error for an unexpected exception, logged with its traceback by the caller's ``except``."""
    logger.exception("%s crashed", what)
    return MCPError(code=INTERNAL_ERROR, message=INTERNAL_ERROR_TEXT)
