"""Tool arguments are checked like every other input: ``invalid_input: <field>: <what is wrong>``.

The SDK validates arguments against each tool's pydantic model and reports a failure as
``Error executing tool recall: 1 validation error for recallArguments`` followed by pydantic's
multi-line dump with documentation URLs; it also drops arguments the tool does not take, so a
misspelt ``top_n`` silently becomes the default. ``ToolServer`` refuses unknown arguments and words
both refusals, and a call to a tool that does not exist, in the ``code: message`` form of the other
tool errors (REST refuses unknown fields too).
"""

from __future__ import annotations

import logging
import re
from typing import Any

from mcp.server.lowlevel.server import Server
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp_types import CallToolResult, InputRequiredResult
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from app.mcp.results import failure

logger = logging.getLogger(__name__)

_SUBJECT = re.compile(r"^(Input|String|List|Value|Dictionary|Object|Tuple|Set) should\b")
MAX_NAME_CHARS = 64  # an unknown argument's name is echoed back, cut to this length


def problem(error: ErrorDetails) -> str:
    """``field: what is wrong`` for one pydantic error; never the rejected value (it is the caller's data)."""
    field = ".".join(str(part) for part in error["loc"]) or "arguments"
    if error["type"] == "missing":
        return f"{field}: required"
    # "Input should be less than or equal to 50" -> "must be less than or equal to 50"
    return f"{field}: {_SUBJECT.sub('must', error['msg'])}"


def refusal(tool: str, problems: list[str]) -> CallToolResult:
    logger.info("tool %s refused: invalid_input (%d argument problems)", tool, len(problems))
    return failure("invalid_input: " + "; ".join(dict.fromkeys(problems)))


class ToolServer(MCPServer[Any]):
    """An ``MCPServer`` whose tools refuse unknown arguments and report invalid ones as ``invalid_input``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._argument_names: dict[str, frozenset[str]] = {}

    @property
    def protocol(self) -> Server[Any]:
        """The SDK's low-level server: ``MCPServer`` lists resources in one page and has no way to add the
        subscription and logging-level methods, so ``resources``, ``prompts`` and ``live`` register there."""
        return self._lowlevel_server

    async def _arguments_of(self, name: str) -> frozenset[str] | None:
        """The argument names a tool publishes (its input schema's properties); None for an unknown tool."""
        if name not in self._argument_names:
            self._argument_names = {
                tool.name: frozenset(tool.input_schema.get("properties") or ()) for tool in await self.list_tools()
            }
        return self._argument_names.get(name)

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        known = await self._arguments_of(name)
        if known is None:
            logger.info("tool call refused: unknown_tool")
            return failure(f"unknown_tool: there is no tool named {name[:MAX_NAME_CHARS]!r}; tools/list names them")
        unknown = [key for key in arguments if key not in known]
        if unknown:
            return refusal(name, [f"{key[:MAX_NAME_CHARS]}: unknown argument" for key in unknown])
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            # The SDK raises a ToolError caused by the ValidationError only when the arguments do not fit
            # the tool's model; a tool's own failures never get here (``run_tool`` answers them).
            if isinstance(exc, UnexpectedToolError) or not isinstance(exc.__cause__, ValidationError):
                raise
            return refusal(name, [problem(error) for error in exc.__cause__.errors()])
