"""memory-mcp: one shared memory and one task board for AI coding agents, over MCP and REST."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("memory-mcp")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"
