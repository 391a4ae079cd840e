"""``memory-mcp config <client>``: print the client config JSON for this server.

The URL is ``--url``, else ``MEMORY_MCP_URL``, else ``http://localhost:<MEMORY_MCP_PORT or 3002>``.
When ``MEMORY_MCP_TOKEN`` is set the config carries ``"headers": {"Authorization": "Bearer …"}``.
By default the header holds the placeholder ``${MEMORY_MCP_TOKEN}`` rather than the secret, so the
output can be pasted into a file that is committed or shared: Claude Code (``.mcp.json``) and
OpenClaw expand ``${VAR}`` from the environment. ``--show-token`` prints the real token for clients
that do not expand variables; keep such a file private.

Claude Desktop, Cursor and VS Code get a command entry instead: they launch ``memory-mcp stdio``,
which forwards to the server, with the URL and token in its ``env``. The token placeholder is each
client's own spelling (Cursor ``${env:…}``, VS Code an ``${input:…}`` prompt); Claude Desktop expands
nothing, so for it the placeholder must be replaced by hand or ``--show-token`` used.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from app.cli.client import EXIT_OK, EXIT_USAGE, token_from_env
from app.cli.output import print_json

SERVER_NAME = "memory-mcp"
TOKEN_PLACEHOLDER = "${MEMORY_MCP_TOKEN}"
URL_CLIENTS = ("claude", "antigravity", "openclaw")
STDIO_CLIENTS = ("claude-desktop", "cursor", "vscode")
CLIENTS = URL_CLIENTS + STDIO_CLIENTS
VSCODE_TOKEN_INPUT = "memory-mcp-token"
STDIO_TOKEN_PLACEHOLDERS = {
    "claude-desktop": TOKEN_PLACEHOLDER,  # not expanded by Claude Desktop: replace it, or use --show-token
    "cursor": "${env:MEMORY_MCP_TOKEN}",
    "vscode": "${input:" + VSCODE_TOKEN_INPUT + "}",
}


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


def stdio_command() -> str:
    """The ``memory-mcp`` beside this Python, by full path: desktop apps start commands with a minimal PATH."""
    beside = shutil.which("memory-mcp", path=str(Path(sys.executable).parent))
    return beside or shutil.which("memory-mcp") or "memory-mcp"


def stdio_config(client: str, base: str, show_token: bool) -> dict[str, Any]:
    """A command entry running ``memory-mcp stdio``; VS Code names its list ``servers`` and wants a ``type``."""
    env = {"MEMORY_MCP_URL": base}
    token = token_from_env()
    if token is not None:
        env["MEMORY_MCP_TOKEN"] = token if show_token else STDIO_TOKEN_PLACEHOLDERS[client]
    entry: dict[str, Any] = {"command": stdio_command(), "args": ["stdio"], "env": env}
    if client != "vscode":
        return {"mcpServers": {SERVER_NAME: entry}}
    document: dict[str, Any] = {"servers": {SERVER_NAME: {"type": "stdio", **entry}}}
    if token is not None and not show_token:
        prompt = {"type": "promptString", "id": VSCODE_TOKEN_INPUT, "description": "memory-mcp token", "password": True}
        document = {"inputs": [prompt], **document}
    return document


def build_config(
    client: str, transport: str | None = None, url: str | None = None, show_token: bool = False
) -> dict[str, Any]:
    """The config document for one client."""
    if client in STDIO_CLIENTS:
        return stdio_config(client, base_url(url), show_token)
    return BUILDERS[client](base_url(url), transport or "http", auth_headers(show_token))


def _config(args: argparse.Namespace) -> int:
    if args.transport is not None and args.client in STDIO_CLIENTS:
        print(f"memory-mcp: {args.client} runs `memory-mcp stdio`; --transport does not apply", file=sys.stderr)
        return EXIT_USAGE
    if args.transport == "rest" and args.client != "openclaw":
        print("memory-mcp: --transport rest is only for openclaw", file=sys.stderr)
        return EXIT_USAGE
    print_json(build_config(args.client, args.transport, args.url, args.show_token))
    if args.client == "claude-desktop" and token_from_env() is not None and not args.show_token:
        print(
            f"memory-mcp: Claude Desktop does not expand {TOKEN_PLACEHOLDER}: replace it with the token, "
            "or print the config with --show-token (and keep the file private)",
            file=sys.stderr,
        )
    return EXIT_OK


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``config``."""
    config = commands.add_parser(
        "config",
        help="print the MCP client config JSON (Claude Code, Claude Desktop, Cursor, VS Code, Antigravity, OpenClaw)",
        description="Print the client config for this server. With MEMORY_MCP_TOKEN set, the config has an "
        "Authorization header holding ${MEMORY_MCP_TOKEN} (expanded by Claude Code and OpenClaw); "
        "--show-token prints the real token instead. claude-desktop, cursor and vscode get an entry that runs "
        "`memory-mcp stdio`.",
    )
    config.add_argument("client", choices=CLIENTS, help="which client the config is for")
    config.add_argument(
        "--transport",
        choices=("http", "sse", "rest"),
        help="http = Streamable HTTP at /mcp (default); sse = legacy SSE at /mcp/sse; rest = REST URLs (openclaw); "
        "not for the stdio clients",
    )
    config.add_argument("--url", help="server base URL (default $MEMORY_MCP_URL or http://localhost:3002)")
    config.add_argument("--show-token", action="store_true", help="put the real token in the header")
    config.set_defaults(handler=_config)
