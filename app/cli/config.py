"""``memory-mcp config claude|antigravity|openclaw``: print the client config JSON for this server.

The URL is ``--url``, else ``MEMORY_MCP_URL``, else ``http://localhost:<MEMORY_MCP_PORT or 3002>``.
When ``MEMORY_MCP_TOKEN`` is set the config carries ``"headers": {"Authorization": "Bearer …"}``.
By default the header holds the placeholder ``${MEMORY_MCP_TOKEN}`` rather than the secret, so the
output can be pasted into a file that is committed or shared: Claude Code (``.mcp.json``) and
OpenClaw expand ``${VAR}`` from the environment. ``--show-token`` prints the real token for clients
that do not expand variables; keep such a file private.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from app.cli.client import EXIT_OK, EXIT_USAGE, token_from_env
from app.cli.output import print_json

SERVER_NAME = "memory-mcp"
TOKEN_PLACEHOLDER = "${MEMORY_MCP_TOKEN}"
CLIENTS = ("claude", "antigravity", "openclaw")


def base_url(override: str | None) -> str:
    """Where clients reach the server; ``localhost`` so Claude Code's documented form matches."""
    if override or os.environ.get("MEMORY_MCP_URL"):
        return (override or os.environ["MEMORY_MCP_URL"]).rstrip("/")
    return f"http://localhost:{os.environ.get('MEMORY_MCP_PORT', '3002').strip() or '3002'}"


def endpoint(base: str, transport: str) -> str:
    return f"{base}/mcp/sse" if transport == "sse" else f"{base}/mcp"


def auth_headers(show_token: bool) -> dict[str, str]:
    token = token_from_env()
    if token is None:
        return {}
    return {"Authorization": f"Bearer {token if show_token else TOKEN_PLACEHOLDER}"}


def claude_config(base: str, transport: str, headers: dict[str, str]) -> dict[str, Any]:
    """``.mcp.json`` / ``claude mcp add-json`` shape; Claude Code skips an entry without ``type``."""
    entry: dict[str, Any] = {"type": transport, "url": endpoint(base, transport)}
    if headers:
        entry["headers"] = headers
    return {"mcpServers": {SERVER_NAME: entry}}


def antigravity_config(base: str, transport: str, headers: dict[str, str]) -> dict[str, Any]:
    """``mcp_config.json``: Antigravity reads a remote server from ``serverUrl``."""
    entry: dict[str, Any] = {"serverUrl": endpoint(base, transport)}
    if headers:
        entry["headers"] = headers
    return {"mcpServers": {SERVER_NAME: entry}}


def openclaw_config(base: str, transport: str, headers: dict[str, str]) -> dict[str, Any]:
    """``openclaw.json`` ``mcp.servers`` entry, or the REST endpoints for a plugin or skill."""
    if transport == "rest":
        rest: dict[str, Any] = {
            "vectorSearchUrl": f"{base}/api/lancedb/vector-search?q={{query}}&limit=5",
            "keywordSearchUrl": f"{base}/api/lancedb/search?q={{query}}",
            "memoriesUrl": f"{base}/api/lancedb/memories",
        }
        if headers:
            rest["headers"] = headers
        return {SERVER_NAME: rest}
    entry: dict[str, Any] = {
        "url": endpoint(base, transport),
        "transport": "sse" if transport == "sse" else "streamable-http",
    }
    if headers:
        entry["headers"] = headers
    return {"mcp": {"servers": {SERVER_NAME: entry}}}


BUILDERS = {"claude": claude_config, "antigravity": antigravity_config, "openclaw": openclaw_config}


def build_config(client: str, transport: str, url: str | None = None, show_token: bool = False) -> dict[str, Any]:
    """The config document for one client."""
    return BUILDERS[client](base_url(url), transport, auth_headers(show_token))


def _config(args: argparse.Namespace) -> int:
    if args.transport == "rest" and args.client != "openclaw":
        print("memory-mcp: --transport rest is only for openclaw", file=sys.stderr)
        return EXIT_USAGE
    print_json(build_config(args.client, args.transport, args.url, args.show_token))
    return EXIT_OK


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``config``."""
    config = commands.add_parser(
        "config",
        help="print the MCP client config JSON for Claude Code, Antigravity or OpenClaw",
        description="Print the client config for this server. With MEMORY_MCP_TOKEN set, the config has an "
        "Authorization header holding ${MEMORY_MCP_TOKEN} (expanded by Claude Code and OpenClaw); "
        "--show-token prints the real token instead.",
    )
    config.add_argument("client", choices=CLIENTS, help="which client the config is for")
    config.add_argument(
        "--transport",
        choices=("http", "sse", "rest"),
        default="http",
        help="http = Streamable HTTP at /mcp (default); sse = legacy SSE at /mcp/sse; rest = REST URLs (openclaw)",
    )
    config.add_argument("--url", help="server base URL (default $MEMORY_MCP_URL or http://localhost:3002)")
    config.add_argument("--show-token", action="store_true", help="put the real token in the header")
    config.set_defaults(handler=_config)
