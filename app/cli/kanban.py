"""``memory-mcp kanban import-obsidian|export-obsidian PATH``: work directly on the kanban SQLite file."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pydantic import ValidationError

from app.errors import AppError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


def _run(args: argparse.Namespace) -> int:
    from app.kanban.db import Database
    from app.kanban.obsidian_io import export_obsidian, import_obsidian
    from app.kanban.store import TaskStore
    from app.settings import Settings

    try:
        settings = Settings(**({"kanban_db": args.kanban_db} if args.kanban_db else {}))
    except ValidationError as exc:
        for error in exc.errors():
            print(f"memory-mcp: {error['msg']}", file=sys.stderr)
        return EXIT_USAGE
    db = Database(settings.kanban_db_path)
    try:
        db.migrate()
        store = TaskStore(db)
        if args.kanban_command == "import-obsidian":
            report = import_obsidian(store, Path(args.path).expanduser())
            print(f"imported {report.cards} cards ({report.created} new, {report.updated} updated) "
                  f"into {settings.kanban_db_path}")
            for header in report.skipped_columns:
                print(f"kept as text (unknown column): {header}")
        else:
            export = export_obsidian(store, Path(args.path).expanduser())
            print(f"exported {export.task_files} task notes and {export.board_path}")
    except (AppError, OSError) as exc:
        print(f"memory-mcp: {exc}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        db.close()
    return EXIT_OK


def add_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``kanban import-obsidian PATH`` and ``kanban export-obsidian PATH``."""
    kanban = commands.add_parser("kanban", help="kanban board maintenance (works on the SQLite file)")
    sub = kanban.add_subparsers(dest="kanban_command", required=True, metavar="ACTION")
    for name, text in (
        ("import-obsidian", "import an Obsidian vault (Kanban.md + task/<id>.md) into the board"),
        ("export-obsidian", "write the board as an Obsidian vault (Kanban.md + task/<id>.md)"),
    ):
        action = sub.add_parser(name, help=text)
        action.add_argument("path", help="vault directory or path of its Kanban.md")
        action.add_argument("--kanban-db", dest="kanban_db", help="kanban SQLite file (default from settings)")
        action.set_defaults(handler=_run)
