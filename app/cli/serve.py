"""``memory-mcp serve``: start the server (one process, one worker)."""

from __future__ import annotations

import argparse
import errno
import socket
import sys
from typing import Any

from app.cli.client import EXIT_OK, EXIT_REFUSED, EXIT_USAGE


def add_commands(commands: Any) -> None:
    serve = commands.add_parser("serve", help="start the server (one process, one worker)")
    serve.add_argument("--host", help="bind address (default 127.0.0.1; others need a token)")
    serve.add_argument("--port", type=int, help="port (default 3002)")
    serve.add_argument("--db", dest="db_path",
                       help="LanceDB directory or s3:// gs:// az:// URI (default ~/.openclaw/memory/lancedb-pro)")
    serve.add_argument("--provider", dest="embedding_provider", help="embedding provider (default local)")
    serve.add_argument("--kanban-db", dest="kanban_db", help="the board: a SQLite file, or a postgresql:// URL")
    serve.add_argument(
        "--allow-remote", action="store_true", help="allow a non-loopback bind without a token (unsafe)"
    )
    serve.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    from app.settings import Settings, describe_errors
    from app.settings_checks import problems

    overrides: dict[str, Any] = {}
    for field in ("host", "port", "db_path", "embedding_provider", "kanban_db"):
        value = getattr(args, field, None)
        if value is not None:
            overrides[field] = value
    if args.allow_remote:
        overrides["allow_remote"] = True
    # A bad setting ends start-up with one line per variable (never its value), status 2, no traceback.
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        for line in describe_errors(exc):
            print(f"memory-mcp: {line}", file=sys.stderr)
        return EXIT_USAGE
    except SettingsError as exc:  # a value the settings sources could not even parse (.env syntax, …)
        print(f"memory-mcp: {exc}", file=sys.stderr)
        return EXIT_USAGE
    # Paths that must be usable and a board that must answer, before the port opens (app/settings_checks.py).
    refused = problems(settings)
    for line in refused:
        print(f"memory-mcp: {line}", file=sys.stderr)
    if refused:
        return EXIT_USAGE
    # Bind before the app and its heavy imports: a busy port is an error at once, before anything
    # says "ready".
    try:
        listener = bind_listener(settings.host, settings.port)
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:  # no such address here, or a port this user may not bind
            print(f"memory-mcp: MEMORY_MCP_HOST / MEMORY_MCP_PORT: cannot listen on {settings.host}:{settings.port} "
                  f"({exc.strerror or exc})", file=sys.stderr)
            return EXIT_USAGE
        print(f"memory-mcp: cannot listen on {settings.host}:{settings.port}: {exc.strerror or exc}. "
              "Is another memory-mcp already running? Stop it, or choose another port with --port "
              "or MEMORY_MCP_PORT.", file=sys.stderr)
        return EXIT_REFUSED

    # Heavy imports only once the settings passed and the port is ours.
    import signal

    from app import heap

    heap.tune_allocators()  # before any worker thread exists: see app/heap.py

    import uvicorn

    from app.main import create_app

    if settings.allow_remote and not settings.is_loopback and settings.token is None:
        print(
            f"memory-mcp: WARNING: serving {settings.host} with no token (--allow-remote): "
            "anyone who can reach this port can read and write every memory",
            file=sys.stderr,
        )
    def _exit_zero(signum: int, frame: object) -> None:
        raise SystemExit(EXIT_OK)

    # uvicorn re-raises SIGTERM/SIGINT after its graceful shutdown; with this handler as the one it
    # restores, that re-raise ends the process with status 0 instead of "killed by signal".
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _exit_zero)
    config = uvicorn.Config(
        create_app(settings, freeze_startup_objects=True),
        host=settings.host,
        port=settings.port,
        workers=1,
        timeout_graceful_shutdown=5,
        timeout_keep_alive=5,
        log_level=settings.log_level.lower(),
        # configure_logging already formats uvicorn's loggers; its default dictConfig would replace that.
        log_config=None,
        # The access log prints query strings, where a misconfigured client may put its token.
        access_log=False,
    )
    uvicorn.Server(config).run(sockets=[listener])
    return EXIT_OK


def bind_listener(host: str, port: int) -> socket.socket:
    """A bound TCP socket for ``host``:``port`` (uvicorn listens on it).

    Raises:
        OSError: the address is in use or cannot be bound.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
    except OSError:
        listener.close()
        raise
    # Close-on-exec (Python's default, kept on purpose): under uvloop a job's close_fds is not applied,
    # and a job holding this socket would keep the port after the server dies and could accept() its clients.
    listener.set_inheritable(False)
    return listener
