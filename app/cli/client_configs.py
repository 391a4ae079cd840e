"""``memory-mcp doctor``'s look at the MCP clients' config files: will each entry for this server connect?

A client that cannot use an entry often says nothing (Claude Code 2.1 skips an entry without
``"type"`` with one line in its debug log), so the user sees no memory and no error. For every entry
that points at this server (by name, by URL, or by running ``memory-mcp stdio``) in the files below,
the doctor says what the client will do with it and prints the entry that works:

* Claude Code: ``~/.claude.json`` (its own ``mcpServers`` and each project's) and ``./.mcp.json``:
  ``type`` ``http`` for ``/mcp`` or ``sse`` for ``/mcp/sse`` is required;
* Claude Desktop ``claude_desktop_config.json``: commands only, so ``memory-mcp stdio``;
* Cursor ``~/.cursor/mcp.json`` and ``./.cursor/mcp.json``: ``url`` (no type needed) or a command;
* VS Code ``./.vscode/mcp.json`` and the user ``mcp.json``: a ``servers`` list whose entries need ``type``;
* Antigravity ``~/.gemini/antigravity/mcp_config.json``: a remote server is read from ``serverUrl``.

Every URL entry must name this server's host and port and, when the server has a token, send it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from app.cli.client import token_from_env
from app.cli.config import SERVER_NAME, TOKEN_PLACEHOLDER, antigravity_config, claude_config, stdio_config
from app.memory.store.diagnostics import Check

LOOPBACK = {"127.0.0.1", "localhost", "::1", "0.0.0.0"}  # a client on this machine reaches a wildcard bind too
TYPED = {"claude-code", "vscode"}  # clients that skip a URL entry without a matching "type"
PLACEHOLDERS = {"claude-code": TOKEN_PLACEHOLDER, "antigravity": TOKEN_PLACEHOLDER,
                "cursor": "${env:MEMORY_MCP_TOKEN}", "vscode": "${env:MEMORY_MCP_TOKEN}"}


@dataclass(frozen=True)
class Entry:
    client: str
    where: str  # file and key path, for the report
    name: str
    body: dict[str, Any]


def config_files(home: Path, cwd: Path) -> list[tuple[str, Path]]:
    """Where each client keeps its MCP servers, for this user and this project."""
    appdata = Path(os.environ["APPDATA"]) if os.environ.get("APPDATA") else home / "AppData" / "Roaming"
    app_dirs = (home / ".config", home / "Library" / "Application Support", appdata)  # Linux, macOS, Windows
    return [
        ("claude-code", home / ".claude.json"),
        ("claude-code", cwd / ".mcp.json"),
        *(("claude-desktop", base / "Claude" / "claude_desktop_config.json") for base in app_dirs),
        ("cursor", home / ".cursor" / "mcp.json"),
        ("cursor", cwd / ".cursor" / "mcp.json"),
        ("vscode", cwd / ".vscode" / "mcp.json"),
        *(("vscode", base / "Code" / "User" / "mcp.json") for base in app_dirs),
        ("antigravity", home / ".gemini" / "antigravity" / "mcp_config.json"),
    ]


def _load(path: Path) -> Any:
    text = path.read_text(encoding="utf-8")
    try:
        return json.loads(text)
    except ValueError:
        # VS Code's files are JSON with comments: drop whole-line // comments and trailing commas.
        stripped = re.sub(r"^\s*//.*$", "", text, flags=re.MULTILINE)
        return json.loads(re.sub(r",(\s*[}\]])", r"\1", stripped))


def entries(client: str, path: Path) -> Iterator[Entry]:
    """The server entries of one config file (Claude Code's ``projects`` included)."""
    document = _load(path)
    if not isinstance(document, dict):
        return
    key = "servers" if client == "vscode" else "mcpServers"
    sections: list[tuple[str, Any]] = [(key, document.get(key))]
    if client == "claude-code" and isinstance(document.get("projects"), dict):
        sections += [(f"projects[{project}].mcpServers", settings.get("mcpServers"))
                     for project, settings in document["projects"].items() if isinstance(settings, dict)]
    for section, servers in sections:
        if isinstance(servers, dict):
            for name, body in servers.items():
                if isinstance(body, dict):
                    yield Entry(client, f"{path} {section}.{name}", name, body)


def _same_server(url: str, server: str) -> bool:
    entry, ours = urlsplit(url), urlsplit(server)
    hosts = {entry.hostname or "", ours.hostname or ""}
    return (entry.port or 80) == (ours.port or 80) and (len(hosts) == 1 or hosts <= LOOPBACK)


def _url_of(entry: Entry) -> str | None:
    for key in ("serverUrl", "url", "httpUrl"):
        value = entry.body.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _runs_stdio_bridge(body: dict[str, Any]) -> bool:
    command, args = str(body.get("command", "")), [str(arg) for arg in body.get("args", []) or []]
    return "stdio" in args and ("memory-mcp" in Path(command).name or "app.cli" in args)


def points_here(entry: Entry, server: str) -> bool:
    url = _url_of(entry)
    return ("memory" in entry.name.lower() or (url is not None and _same_server(url, server))
            or _runs_stdio_bridge(entry.body))


def _token_problems(client: str, headers: Any, token: str | None) -> list[str]:
    if token is None:
        return []
    value = headers.get("Authorization") or headers.get("authorization") if isinstance(headers, dict) else None
    if not value:
        return ["no Authorization header: the server has a token and answers 401"]
    if "${" in str(value):
        return []  # expanded by the client from its environment: only the user can check that variable
    if str(value) != f"Bearer {token}":
        return ["the Authorization header holds another token than MEMORY_MCP_TOKEN: the server answers 401"]
    return []


def url_problems(entry: Entry, url: str, server: str, token: str | None) -> tuple[str, list[str]]:
    """The transport the URL names, and why the client would not connect with this entry."""
    problems: list[str] = []
    path = urlsplit(url).path.rstrip("/")
    transport = "sse" if path.endswith("/mcp/sse") else "http"
    if path not in ("/mcp", "/mcp/sse"):
        problems.append(f"{url} is not an MCP endpoint of this server (/mcp, or /mcp/sse for legacy SSE)")
    if not _same_server(url, server):
        problems.append(f"{url} is not where the server listens ({server})")
    if entry.client == "claude-desktop":
        problems.append("Claude Desktop's config file starts commands only: run `memory-mcp stdio`")
    if entry.client == "antigravity" and "serverUrl" not in entry.body:
        problems.append("Antigravity reads a remote server from serverUrl, not url")
    kind = entry.body.get("type")
    if entry.client in TYPED and kind is None:
        problems.append('no "type": the client skips the entry (Claude Code: "invalid MCP server config")')
    elif entry.client in TYPED and kind not in (transport, "streamable-http" if transport == "http" else transport):
        problems.append(f'"type": "{kind}" does not fit {path or "/"}, which speaks {transport}')
    problems += _token_problems(entry.client, entry.body.get("headers"), token)
    return transport, problems


def stdio_problems(entry: Entry, server: str, token: str | None) -> list[str]:
    command = str(entry.body.get("command", ""))
    problems = []
    if not (Path(command).is_file() or shutil.which(command)):
        problems.append(f"the command {command!r} is not found (desktop apps start commands with a minimal PATH)")
    env = entry.body.get("env") or {}
    url = env.get("MEMORY_MCP_URL") if isinstance(env, dict) else None
    if url and not _same_server(str(url), server):
        problems.append(f"MEMORY_MCP_URL={url} is not where the server listens ({server})")
    if token is not None:
        given = env.get("MEMORY_MCP_TOKEN") if isinstance(env, dict) else None
        if not given:
            problems.append("no MEMORY_MCP_TOKEN in env: the server has a token and answers 401")
        elif entry.client == "claude-desktop" and "${" in str(given):
            problems.append("Claude Desktop does not expand ${…}: put the token itself in env")
    return problems


def corrected(entry: Entry, transport: str, server: str, token: str | None) -> dict[str, Any]:
    """The entry this client accepts for this server, the token as the client's own placeholder."""
    if entry.client == "claude-desktop" or (_url_of(entry) is None and entry.client != "vscode"):
        return dict(stdio_config("cursor" if entry.client == "cursor" else "claude-desktop", server, False)
                    ["mcpServers"][SERVER_NAME])
    if _url_of(entry) is None:
        return dict(stdio_config("vscode", server, False)["servers"][SERVER_NAME])
    headers = {"Authorization": f"Bearer {PLACEHOLDERS[entry.client]}"} if token is not None else {}
    if entry.client == "antigravity":
        return dict(antigravity_config(server, transport, headers)["mcpServers"][SERVER_NAME])
    fixed = dict(claude_config(server, transport, headers)["mcpServers"][SERVER_NAME])
    if entry.client == "cursor":
        fixed.pop("type")
    return fixed


def check_entry(entry: Entry, server: str, token: str | None) -> Check:
    url = _url_of(entry)
    transport, problems = ("http", stdio_problems(entry, server, token)) if url is None else \
        url_problems(entry, url, server, token)
    if not problems:
        return Check(name="client_config", status="ok", detail=f"{entry.where}: {entry.client} connects")
    fix = json.dumps({entry.name: corrected(entry, transport, server, token)}, ensure_ascii=False)
    # An entry that certainly means this server and will not connect leaves that client with no memory at
    # all: a failure. One matched only by its name may be another server, so it is a warning.
    ours = _runs_stdio_bridge(entry.body) if url is None else _same_server(url, server)
    return Check(name="client_config", status="fail" if ours else "warn",
                 detail=f"{entry.where}: " + "; ".join(problems), fix=f"use {fix}")


def check_client_configs(server: str, home: Path | None = None, cwd: Path | None = None) -> list[Check]:
    """One check per entry for this server in every client config file found."""
    checks = []
    token = token_from_env()
    for client, path in config_files(home or Path.home(), cwd or Path.cwd()):
        if not path.is_file():
            continue
        try:
            found = [entry for entry in entries(client, path) if points_here(entry, server)]
        except (OSError, ValueError) as exc:
            checks.append(Check(name="client_config", status="warn", detail=f"{path} is not readable JSON: {exc}",
                                fix=f"fix the file, or the {client} client ignores it"))
            continue
        checks += [check_entry(entry, server, token) for entry in found]
    return checks
