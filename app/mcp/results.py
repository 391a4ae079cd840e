"""Tool results: structured content plus the same JSON as text, and errors a model can act on."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable

from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel

from app.errors import AppError

logger = logging.getLogger(__name__)

INTERNAL_ERROR_TEXT = "internal_error: the server could not run this tool; the details are in the server log"


def success(model: BaseModel) -> CallToolResult:
    """``structuredContent`` for clients that read it, the same JSON as text for those that read ``content[0]``."""
    data = model.model_dump(mode="json")
    text = json.dumps(data, ensure_ascii=False)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


def failure(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


async def run_tool(name: str, call: Callable[[], Awaitable[BaseModel]]) -> CallToolResult:
    """Run one service call; domain errors become ``"{code}: {message}"`` tool errors, crashes a generic one."""
    try:
        result = await call()
    except AppError as exc:
        # The code only: messages can quote the caller's content, which is never logged at info.
        logger.info("tool %s refused: %s", name, exc.code)
        return failure(f"{exc.code}: {exc.message}")
    except Exception:
        logger.exception("tool %s crashed", name)
        return failure(INTERNAL_ERROR_TEXT)
    return success(result)
