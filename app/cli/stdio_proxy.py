"""The stdio proxy of ``memory-mcp stdio``: an MCP server on stdin/stdout whose tools are the shared server's.

A low-level SDK ``Server`` answers ``tools/list`` and ``tools/call`` by sending the same request over one
Streamable HTTP session with the running server (:class:`Upstream`), so the tool definitions and results
are the server's own, byte for byte; so are prompts, resources and completion (``FORWARDED``). Resource
subscriptions and log messages are not relayed: a desktop client that wants them connects over HTTP.

The session is opened when a request needs it and kept. When the server cannot be reached, a tool call
returns a tool error (``isError``) naming the URL and ``memory-mcp serve`` and stderr says the same, and
``tools/list`` answers the tool list shipped with this package (``tool_list.json``, which a test keeps
equal to the server's): a desktop client that starts before the server lists the tools once and does not
ask again, so an error or an empty list would leave it without tools. The next request tries again.
A session the server no longer knows (it restarted, or the session idled out) answers 404 before anything
runs, so that request is resent once on a fresh session; a connection that breaks while a request is
running is reported, never resent.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import anyio
import httpx2
import mcp_types as types
from anyio.abc import TaskGroup, TaskStatus
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

from app import __version__
from app.cli.client import _is_loopback

logger = logging.getLogger(__name__)

T = TypeVar("T")
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 300.0  # a tool call's own deadlines (embedding, jobs) end it long before this
FAREWELL_S = 3.0  # time given to close the upstream session when the stdio client goes away
FALLBACK_INSTRUCTIONS = (
    "Shared long-term memory and a kanban board for coding agents, served by the memory-mcp server. "
    "Use recall before starting work, remember to store durable facts, and the kanban tools for tasks."
)


SHIPPED_TOOLS = Path(__file__).with_name("tool_list.json")


def shipped_tools() -> types.ListToolsResult:
    """The server's tool list as this package ships it (regenerated and checked by tests/cli/test_stdio.py)."""
    return types.ListToolsResult.model_validate({"tools": json.loads(SHIPPED_TOOLS.read_text(encoding="utf-8"))})


class Unavailable(Exception):
    """The server could not take the request; the message says why and what to do."""


class _SessionGone(Exception):
    """The server answered 404 for the session: it never ran the request, which may be resent."""


def _leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (possibly nested) exception groups."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def warn(message: str) -> None:
    """One line on stderr, where stdio clients keep a server's log."""
    print(f"memory-mcp stdio: {message}", file=sys.stderr, flush=True)


@dataclass(eq=False)
class _Connection:
    """One upstream session: its client once open, and what its HTTP responses said."""

    client: Client | None = None
    refused_status: int | None = None
    unreachable: Exception | None = None  # a connect that failed: that request never reached the server
    session_gone: bool = False
    lost: bool = False
    closing: anyio.Event = field(default_factory=anyio.Event)
    watchers: set[anyio.CancelScope] = field(default_factory=set)

    async def saw(self, response: httpx2.Response) -> None:
        """httpx2 response hook: remember refusals and a session the server has forgotten."""
        if response.status_code in (401, 403):
            self.refused_status = response.status_code
        elif response.status_code == 404 and "mcp-session-id" in response.request.headers:
            self.session_gone = True

    def end(self) -> None:
        """Mark the session unusable and stop every request still waiting on it."""
        self.lost = True
        for scope in self.watchers:
            scope.cancel()
        self.closing.set()


class _RecordingTransport(httpx2.AsyncHTTPTransport):
    """Remembers a failed connect on its connection, which the SDK reports only as a closed connection."""

    def __init__(self, connection: _Connection, *, trust_env: bool) -> None:
        super().__init__(trust_env=trust_env)
        self._connection = connection

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        try:
            return await super().handle_async_request(request)
        except (httpx2.ConnectError, httpx2.ConnectTimeout) as exc:
            self._connection.unreachable = exc
            raise


class Upstream:
    """The Streamable HTTP session with the shared server, opened on demand and replaced when it fails."""

    def __init__(self, url: str, token: str | None, tasks: TaskGroup) -> None:
        self.url = url
        self.instructions: str | None = None
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._tasks = tasks
        self._connection: _Connection | None = None
        self._lock = anyio.Lock()

    async def request(self, send: Callable[[Client], Awaitable[T]]) -> T:
        """Send one request on the session, opening one when there is none.

        Raises:
            Unavailable: the server is unreachable, refused the token, or the connection broke mid-request.
            MCPError: the server answered the request with a JSON-RPC error.
        """
        for attempt in (1, 2):
            connection = await self.connect()
            try:
                return await self._send_on(connection, send)
            except _SessionGone:
                logger.debug("upstream session gone (attempt %d); opening a new one", attempt)
        raise Unavailable(f"the memory-mcp server at {self.url} dropped two new sessions in a row; try again")

    async def connect(self) -> _Connection:
        """The open session, or a new one.

        Raises:
            Unavailable: the session could not be opened.
        """
        async with self._lock:
            current = self._connection
            if current is not None and not current.lost:
                if current.unreachable is None:
                    return current
                # A failed connect (even of a notification) leaves the SDK's transport without its writer.
                current.end()
            connection = _Connection()
            try:
                await self._tasks.start(self._hold, connection)
            except Exception as exc:
                raise Unavailable(self._explain(exc, connection)) from exc
            self._connection = connection
            return connection

    def close(self) -> None:
        if self._connection is not None:
            self._connection.closing.set()

    async def _send_on(self, connection: _Connection, send: Callable[[Client], Awaitable[T]]) -> T:
        assert connection.client is not None  # set before the holder reports the session started
        with anyio.CancelScope() as scope:
            connection.watchers.add(scope)
            try:
                return await send(connection.client)
            except MCPError as exc:
                if connection.session_gone:
                    connection.end()
                    raise _SessionGone from exc
                if connection.refused_status is not None:  # the server restarted with another token
                    connection.end()
                    raise Unavailable(self._refused(connection.refused_status)) from exc
                if connection.lost or exc.code == types.CONNECTION_CLOSED:
                    connection.end()
                    raise Unavailable(self._broken(connection)) from exc
                raise
            finally:
                connection.watchers.discard(scope)
        raise Unavailable(self._broken(connection))  # the holder ended the session while the request waited

    async def _hold(self, connection: _Connection, *, task_status: TaskStatus[None]) -> None:
        """Own the session in one task for its whole life (anyio scopes must be left by the task that entered them)."""
        timeout = httpx2.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
        # A proxy from the environment must not capture calls to a server on this machine.
        local = _is_loopback(urlsplit(self.url).hostname or "")
        http = httpx2.AsyncClient(
            headers=self._headers,
            timeout=timeout,
            trust_env=not local,
            transport=_RecordingTransport(connection, trust_env=not local),
            event_hooks={"response": [connection.saw]},
        )
        info = types.Implementation(name="memory-mcp-stdio", version=__version__)
        started = False
        try:
            transport = streamable_http_client(self.url, http_client=http)
            async with http, Client(transport, mode="legacy", cache=None, client_info=info) as client:  # type: ignore[arg-type]
                connection.client = client
                self.instructions = client.instructions
                task_status.started()
                started = True
                await connection.closing.wait()
        except Exception:
            if not started:
                raise
            logger.debug("upstream session ended", exc_info=True)
        finally:
            connection.end()

    def _refused(self, status: int) -> str:
        return (
            f"the memory-mcp server at {self.url} refused the token (HTTP {status}): set MEMORY_MCP_TOKEN to the "
            "server's token in this command's environment"
        )

    def _unreachable(self, exc: BaseException) -> str:
        return (
            f"memory-mcp server not reachable at {self.url} ({type(exc).__name__}: {exc}). Start it with "
            "`memory-mcp serve` (or point MEMORY_MCP_URL at it); the next request tries again"
        )

    def _broken(self, connection: _Connection) -> str:
        if connection.unreachable is not None:
            return self._unreachable(connection.unreachable)
        return (
            f"the connection to the memory-mcp server at {self.url} broke during the request, which may or may "
            "not have run; the next request reconnects"
        )

    def _explain(self, exc: BaseException, connection: _Connection) -> str:
        """What to tell the user when a session could not be opened."""
        if connection.refused_status is not None:
            return self._refused(connection.refused_status)
        unreachable = [leaf for leaf in _leaves(exc) if isinstance(leaf, httpx2.TransportError | OSError)]
        if connection.unreachable is not None or unreachable:
            return self._unreachable(connection.unreachable or unreachable[0])
        logger.debug("opening the upstream session failed", exc_info=exc)
        leaf = _leaves(exc)[0]
        return f"the memory-mcp server at {self.url} could not be used ({type(leaf).__name__}: {leaf})"


class _OneLine(logging.Formatter):
    """Log records on one line: the SDK's tracebacks for a stopped server repeat what the proxy already says."""

    def format(self, record: logging.LogRecord) -> str:
        error = record.exc_info[1] if record.exc_info else None
        return f"memory-mcp stdio: {record.name}: {record.getMessage()}" + (f" ({error!r})" if error else "")


def log_to_stderr() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_OneLine())
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    # Its warnings (GET stream lost, a forgotten session's DELETE refused) are what the proxy reports itself.
    logging.getLogger("mcp.client.streamable_http").setLevel(logging.ERROR)


def build_server(upstream: Upstream, instructions: str) -> Server[Any]:
    """The stdio-side server: ``tools/list`` and ``tools/call`` forwarded as they are."""

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        request = types.ListToolsRequest(params=params)
        try:
            return await upstream.request(lambda client: client.session.send_request(request, types.ListToolsResult))
        except Unavailable as exc:
            warn(f"{exc} (listing the tools this package ships)")
            return shipped_tools()

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        request = types.CallToolRequest(params=params)
        try:
            return await upstream.request(lambda client: client.session.send_request(request, types.CallToolResult))
        except Unavailable as exc:
            warn(str(exc))
            return types.CallToolResult(content=[types.TextContent(type="text", text=str(exc))], is_error=True)

    server = Server(
        "memory-mcp", version=__version__, instructions=instructions, on_list_tools=list_tools, on_call_tool=call_tool
    )
    for method, (params_type, request_type, result_type) in FORWARDED.items():
        server.add_request_handler(method, params_type, _forward(upstream, request_type, result_type))
    return server


#: Requests sent upstream as they are: method -> (params, request and result types).
FORWARDED: dict[str, tuple[type[Any], type[Any], type[Any]]] = {
    "prompts/list": (types.PaginatedRequestParams, types.ListPromptsRequest, types.ListPromptsResult),
    "prompts/get": (types.GetPromptRequestParams, types.GetPromptRequest, types.GetPromptResult),
    "resources/list": (types.PaginatedRequestParams, types.ListResourcesRequest, types.ListResourcesResult),
    "resources/templates/list": (types.PaginatedRequestParams, types.ListResourceTemplatesRequest,
                                 types.ListResourceTemplatesResult),
    "resources/read": (types.ReadResourceRequestParams, types.ReadResourceRequest, types.ReadResourceResult),
    "completion/complete": (types.CompleteRequestParams, types.CompleteRequest, types.CompleteResult),
}


def _forward(upstream: Upstream, request_type: type[Any], result_type: type[Any]) -> Any:
    """A handler sending its request upstream; the server's own errors pass through, an unreachable one is -32603."""

    async def handle(ctx: ServerRequestContext[Any], params: Any) -> Any:
        request = request_type(params=params)
        try:
            return await upstream.request(lambda client: client.session.send_request(request, result_type))
        except Unavailable as exc:
            warn(str(exc))
            raise MCPError(code=types.INTERNAL_ERROR, message=str(exc)) from exc

    return handle


async def serve(url: str, token: str | None) -> None:
    """Serve MCP on stdin/stdout until the client closes stdin."""
    log_to_stderr()
    async with anyio.create_task_group() as tasks:
        upstream = Upstream(url, token, tasks)
        # Connecting first gives the client the server's own instructions, and the user an early hint: a
        # client shows the bridge as connected either way, so stderr and the instructions say why calls fail.
        offline = f" The memory-mcp server was not reachable at {url} when this bridge started: start it with " \
                  "`memory-mcp serve`; each call tries again."
        with anyio.move_on_after(CONNECT_TIMEOUT_S * 2):
            try:
                await upstream.connect()
                offline = ""
            except Unavailable as exc:
                warn(str(exc))
        server = build_server(upstream, upstream.instructions or FALLBACK_INSTRUCTIONS + offline)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
        upstream.close()
        tasks.cancel_scope.deadline = anyio.current_time() + FAREWELL_S
