"""Client commands against a running server over REST: ``remember``, ``recall``, ``forget``, ``list``, ``stats``.

The server is found through ``MEMORY_MCP_URL`` (default ``http://127.0.0.1:3002``, or ``--url``); when
``MEMORY_MCP_TOKEN`` is set it is sent as ``Authorization: Bearer …``. The token is read from the
environment only, never from a flag, so it does not show up in ``ps`` or shell history.

Exit codes (a contract for scripts):

- 0: success
- 1: the server answered with an error (not found, invalid input, unauthorised, unavailable, …)
- 2: usage error (bad arguments, a malformed ``MEMORY_MCP_URL``)
- 3: the server could not be reached (connection refused, timeout, name resolution)
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

from app.cli.env import (  # noqa: F401 - re-exported: the other commands import them from here
    DEFAULT_URL,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    SCOPE_FAMILIES,
    _is_loopback,
    integer,
    scope_for,
    server_url,
    token_from_env,
)
from app.cli.output import local_time, one_line, print_json, render_table

DEFAULT_TIMEOUT_S = 15.0

Handler = Callable[[argparse.Namespace], int]


class CliError(Exception):
    """A failure with the exit code the command should end with."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


class ServerRefused(CliError):
    """The server answered 4xx/5xx; ``code`` is its stable error code when it sent one."""

    def __init__(self, status: int, detail: str, code: str | None) -> None:
        super().__init__(f"{detail} ({code or 'error'}, HTTP {status})", EXIT_REFUSED)
        self.status = status
        self.detail = detail
        self.code = code


class Api:
    """A small synchronous REST client; every failure becomes a :class:`CliError` with its exit code."""

    def __init__(self, base_url: str, token: str | None = None, timeout: float | httpx.Timeout = DEFAULT_TIMEOUT_S):
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise CliError(f"MEMORY_MCP_URL must look like http://127.0.0.1:3002, got {base_url!r}", EXIT_USAGE)
        headers = {"Accept": "application/json", "User-Agent": "memory-mcp-cli"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.base_url = base_url
        self.last_headers: httpx.Headers = httpx.Headers()
        # A proxy from the environment must not capture calls to a server on this machine.
        self._client = httpx.Client(
            base_url=base_url, headers=headers, timeout=timeout, trust_env=not _is_loopback(parts.hostname)
        )

    def __enter__(self) -> Api:
        return self

    def __exit__(self, *_: object) -> None:
        self._client.close()

    def request(self, method: str, path: str, *, params: dict[str, Any] | None = None, body: Any = None) -> Any:
        """Send one request and return the decoded JSON body.

        Raises:
            CliError: exit code 3 when the server cannot be reached, 1 for any error answer.
        """
        query = {key: value for key, value in (params or {}).items() if value is not None}
        try:
            response = self._client.request(method, path, params=query, json=body)
        except httpx.TimeoutException as exc:
            raise CliError(f"memory-mcp at {self.base_url} did not answer in time ({exc!r})", EXIT_UNREACHABLE) from exc
        except httpx.TransportError as exc:
            raise CliError(
                f"cannot reach memory-mcp at {self.base_url}: {exc} (is `memory-mcp serve` running? "
                "set MEMORY_MCP_URL)",
                EXIT_UNREACHABLE,
            ) from exc
        except httpx.RequestError as exc:  # a reachable server that answered something unusable
            raise CliError(f"bad answer from memory-mcp at {self.base_url}: {exc}", EXIT_REFUSED) from exc
        self.last_headers = response.headers
        if response.status_code >= 400:
            raise _refusal(response)
        if response.status_code == 204 or not response.content:
            return {"ok": True}
        try:
            return response.json()
        except ValueError as exc:
            raise CliError(f"unexpected non-JSON answer from {self.base_url}{path}", EXIT_REFUSED) from exc


def _refusal(response: httpx.Response) -> ServerRefused:
    detail, code = response.reason_phrase or "error", None
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        raw = body.get("detail", detail)
        detail = raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False)
        code = body.get("code") if isinstance(body.get("code"), str) else None
    if response.status_code == 401:
        detail += " — set MEMORY_MCP_TOKEN to the server's token"
    elif response.status_code == 421:
        detail += " — the server's MEMORY_MCP_ALLOWED_HOSTS does not include this host name"
    return ServerRefused(response.status_code, detail, code)


def _api(args: argparse.Namespace) -> Api:
    return Api(server_url(args.url), token_from_env(), timeout=args.timeout)


def _run(handler: Handler) -> Handler:
    """Turn CliError into a message on stderr and its exit code."""

    def wrapped(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except CliError as exc:
            print(f"memory-mcp: {exc.message}", file=sys.stderr)
            return exc.exit_code

    return wrapped


# --- commands ---------------------------------------------------------------------------------


def _remember(args: argparse.Namespace) -> int:
    text = sys.stdin.read() if args.text == "-" else args.text
    if not text.strip():
        raise CliError("nothing to remember: TEXT is empty", EXIT_USAGE)
    tags = list(dict.fromkeys(tag.strip() for tag in (args.tags or "").split(",") if tag.strip()))
    body: dict[str, Any] = {"text": text}
    scope = scope_for(args.agent, args.scope)
    if scope:
        body["scope"] = scope
    if tags:
        body["category"] = ",".join(tags)
    if args.importance is not None:
        body["importance"] = args.importance
    with _api(args) as api:
        result = api.request("POST", "/api/lancedb/memories", body=body)
    if args.json:
        print_json(result)
        return EXIT_OK
    print(f"remembered {result.get('id') or result.get('memory_id')}")
    duplicate = result.get("duplicate")
    if isinstance(duplicate, dict):
        other = duplicate.get("memory_id") or duplicate.get("id")
        print(f"note: very similar to {other} (score {float(duplicate.get('score', 0)):.2f})")
    return EXIT_OK


def _recall(args: argparse.Namespace) -> int:
    path = "/api/lancedb/search" if args.keyword else "/api/lancedb/vector-search"
    params = {"q": args.query, "scope": scope_for(args.agent, args.scope), "limit": args.top_k}
    with _api(args) as api:
        hits = api.request("GET", path, params=params)
        mode = api.last_headers.get("X-Search-Mode", "vector")
    if mode != "vector":
        print(f"memory-mcp: note: search mode {mode} (the embedder is unavailable)", file=sys.stderr)
    if args.json:
        print_json(hits)
        return EXIT_OK
    if not hits:
        print("no memories found")
        return EXIT_OK
    rows = [[_number(hit.get("score")), _number(hit.get("similarity")),
             *(one_line(hit.get(key)) for key in ("id", "scope", "text"))] for hit in hits]
    # SCORE orders the list (0..1: similarity and keyword score combined); SIMILARITY is the cosine alone.
    print(render_table(["SCORE", "SIMILARITY", "ID", "SCOPE", "TEXT"], rows))
    for hit in hits:
        copies = hit.get("duplicate_ids") or []
        if copies:
            print(f"{one_line(hit.get('id'))} also stands for {', '.join(one_line(c) for c in copies)} (same text)")
    return EXIT_OK


def _number(value: object) -> str:
    """A score with three decimals, ``-`` when absent (keyword search has no similarity)."""
    return f"{float(value):.3f}" if isinstance(value, int | float) and not isinstance(value, bool) else "-"


def _forget(args: argparse.Namespace) -> int:
    with _api(args) as api:
        try:
            result = api.request("DELETE", f"/api/lancedb/memories/{quote(args.id, safe='')}")
        except ServerRefused as exc:
            if exc.status == 404:
                raise CliError(f"no memory with id {args.id!r}", EXIT_REFUSED) from exc
            raise
    if args.json:
        print_json(result)
    else:
        print(f"forgot {args.id}")
    return EXIT_OK


def _list(args: argparse.Namespace) -> int:
    params = {
        "scope": scope_for(args.agent, args.scope),
        "category": args.category,
        "limit": args.limit,
        "offset": args.offset,
    }
    with _api(args) as api:
        memories = api.request("GET", "/api/lancedb/memories", params=params)
    if args.json:
        print_json(memories)
        return EXIT_OK
    if not memories:
        print("no memories")
        return EXIT_OK
    rows = [
        [
            one_line(item.get("id")),
            local_time(item.get("timestamp")),
            one_line(item.get("scope")),
            f"{float(item.get('importance', 0)):.2f}",
            one_line(item.get("category")),
            one_line(item.get("text")),
        ]
        for item in memories
    ]
    print(render_table(["ID", "TIME", "SCOPE", "IMP", "TAGS", "TEXT"], rows))
    return EXIT_OK


def _stats(args: argparse.Namespace) -> int:
    with _api(args) as api:
        stats = api.request("GET", "/api/lancedb/stats")
    if args.json or not isinstance(stats, dict):
        print_json(stats)
        return EXIT_OK
    for key, value in stats.items():
        if isinstance(value, dict) and all(isinstance(v, int | float) for v in value.values()):
            print(f"{key}:")
            rows = [[one_line(name), str(count)] for name, count in sorted(value.items(), key=lambda kv: -kv[1])]
            print(render_table(["NAME", "COUNT"], rows, indent=2) if rows else "  (none)")
        elif isinstance(value, dict):
            print(f"{key}: " + ", ".join(f"{k}={one_line(v)}" for k, v in value.items()))
        else:
            print(f"{key}: {one_line(value)}")
    return EXIT_OK


# --- parser -----------------------------------------------------------------------------------


def _importance(text: str) -> float:
    try:
        value = float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from exc
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError("importance must be between 0 and 1")
    return value


def client_options() -> argparse.ArgumentParser:
    """Options every client command shares (``--url``, ``--timeout``, ``--json``)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", help=f"server base URL (default $MEMORY_MCP_URL or {DEFAULT_URL})")
    common.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds to wait for the server")
    common.add_argument("--json", action="store_true", help="print the server's JSON answer (for scripts)")
    return common


def _scope_options(parser: argparse.ArgumentParser, what: str) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--agent", help=f"{what} the agent's scope (claude-code -> agent:claude-code)")
    group.add_argument("--scope", help=f"{what} this exact scope (global, agent:x, project:x, user:x, custom:x)")


EPILOG = (
    "environment: MEMORY_MCP_URL (default http://127.0.0.1:3002), MEMORY_MCP_TOKEN (sent as a bearer token). "
    "exit codes: 0 ok, 1 the server refused (error or not found), 2 usage error, 3 server unreachable."
)


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the REST client commands on the ``memory-mcp`` parser."""
    common = [client_options()]

    def sub(name: str, help_text: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=help_text, description=help_text, epilog=EPILOG, parents=common)

    remember = sub("remember", "store a memory on the running server")
    remember.add_argument("text", metavar="TEXT", help="what to remember ('-' reads standard input)")
    remember.add_argument("--tags", help="comma-separated tags, e.g. decision,build")
    remember.add_argument("--importance", type=_importance, help="0..1 (server default 0.7)")
    _scope_options(remember, "store in")
    remember.set_defaults(handler=_run(_remember))

    recall = sub("recall", "find memories by meaning (or by keyword with --keyword)")
    recall.add_argument("query", metavar="QUERY", help="what to look for")
    recall.add_argument("--top-k", type=integer(1, 100), default=5, help="how many results (default 5)")
    recall.add_argument("--keyword", action="store_true", help="keyword search instead of vector search")
    _scope_options(recall, "search only")
    recall.set_defaults(handler=_run(_recall))

    forget = sub("forget", "delete one memory by id")
    forget.add_argument("id", metavar="ID", help="the memory id (as shown by list/recall)")
    forget.set_defaults(handler=_run(_forget))

    listing = sub("list", "list memories, newest first")
    _scope_options(listing, "list only")
    listing.add_argument("--category", help="only memories with this tag")
    listing.add_argument("--limit", type=integer(1, 200), help="page size (server default 30)")
    listing.add_argument("--offset", type=integer(0), help="skip this many (for paging)")
    listing.set_defaults(handler=_run(_list))

    stats = sub("stats", "counts per scope and category, and the embedding model")
    stats.set_defaults(handler=_run(_stats))
