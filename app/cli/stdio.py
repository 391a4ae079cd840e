"""``memory-mcp stdio``: serve MCP on stdin/stdout for clients that can only launch a command.

Claude Desktop, Cursor and VS Code start an MCP server as a child process; this command is that child.
It opens no store: every request goes to the running ``memory-mcp serve`` over Streamable HTTP at
``<--url, else MEMORY_MCP_URL, else http://127.0.0.1:3002>/mcp`` with ``MEMORY_MCP_TOKEN`` as the
bearer token, so the tools, their schemas and their results are the server's own. The proxy itself
lives in :mod:`app.cli.stdio_proxy`, imported only when the command runs (the MCP client and server
add most of a second to start-up, which every other command, hooks included, would otherwise pay).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any
from urllib.parse import urlsplit

from app.cli.client import EXIT_OK, EXIT_USAGE, server_url, token_from_env


def add_commands(commands: Any) -> None:
    """Register ``stdio``."""
    stdio = commands.add_parser(
        "stdio",
        help="serve MCP on stdin/stdout, forwarded to the running server (for Claude Desktop, Cursor, VS Code)",
        description="Serve MCP on stdin/stdout for clients that launch a command, forwarding every request to "
        "the running memory-mcp server over Streamable HTTP (start it with `memory-mcp serve`). The token is "
        "read from MEMORY_MCP_TOKEN.",
    )
    stdio.add_argument("--url", help="server base URL (default $MEMORY_MCP_URL or http://127.0.0.1:3002)")
    stdio.set_defaults(handler=run)


def mcp_endpoint(base: str) -> str | None:
    """The Streamable HTTP endpoint of a server base URL, or None when the URL is not http(s)://host."""
    parts = urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return f"{base}/mcp"


def run(args: argparse.Namespace) -> int:
    base = server_url(args.url)
    endpoint = mcp_endpoint(base)
    if endpoint is None:
        print(f"memory-mcp stdio: MEMORY_MCP_URL must look like http://127.0.0.1:3002, got {base!r}", file=sys.stderr)
        return EXIT_USAGE
    import anyio

    from app.cli import stdio_proxy

    anyio.run(stdio_proxy.serve, endpoint, token_from_env())
    return EXIT_OK
