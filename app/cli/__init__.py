"""The ``memory-mcp`` command: builds the parser from one module per command group.

``memory-mcp hook …`` runs on every prompt of a Claude Code session, so it is routed before anything
else is imported: its path is the standard library only (``app.cli.hooks``, ``app.cli.env``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from app.cli.env import EXIT_USAGE

# Claude Code treats exit 2 from a hook as "block the prompt"; a mistyped hook command must not do that.
EXIT_HOOK_USAGE = 1


def build_parser() -> argparse.ArgumentParser:
    from app import __version__
    from app.cli import backup, client, config, data, hooks, kanban, serve, service, stdio, table

    parser = argparse.ArgumentParser(prog="memory-mcp", description="Shared memory and kanban for AI agents.")
    parser.add_argument("--version", action="version", version=f"memory-mcp {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve.add_commands(commands)
    stdio.add_commands(commands)
    client.add_commands(commands)
    hooks.add_commands(commands)
    config.add_commands(commands)
    kanban.add_commands(commands)
    data.add_commands(commands)
    table.add_commands(commands)
    backup.add_commands(commands)
    service.add_commands(commands)
    return parser


def _hook_parser() -> argparse.ArgumentParser:
    from app.cli import hooks

    parser = argparse.ArgumentParser(prog="memory-mcp")
    hooks.add_commands(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; exit codes: 0 ok, 1 refused by the server, 2 usage, 3 server unreachable."""
    words = list(sys.argv[1:] if argv is None else argv)
    is_hook = words[:1] == ["hook"]
    try:
        args = (_hook_parser() if is_hook else build_parser()).parse_args(words)
    except SystemExit as exc:
        if exc.code == EXIT_USAGE and is_hook:
            return EXIT_HOOK_USAGE
        raise
    handler = args.handler
    result: int = handler(args)
    return result
