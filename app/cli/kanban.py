"""``memory-mcp kanban import-obsidian|export-obsidian PATH`` and ``kanban migrate``: work directly on the board."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from app.errors import AppError

if TYPE_CHECKING:
    from app.settings import Settings

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


def _settings(kanban_db: str | None) -> Settings | None:
    """Settings with this board, or None after printing why the value is refused."""
    from app.settings import Settings

    try:
        return Settings(**({"kanban_db": kanban_db} if kanban_db else {}))
    except ValidationError as exc:
        for error in exc.errors():
            print(f"memory-mcp: {error['msg']}", file=sys.stderr)
        return None


def _run(args: argparse.Namespace) -> int:
    from app.kanban.backend import open_database
    from app.kanban.obsidian_io import export_obsidian, import_obsidian
    from app.kanban.store import TaskStore

    settings = _settings(args.kanban_db)
    if settings is None:
        return EXIT_USAGE
    db = open_database(settings)
    try:
        db.migrate()
        store = TaskStore(db)
        if args.kanban_command == "import-obsidian":
            report = import_obsidian(store, Path(args.path).expanduser())
            print(f"imported {report.cards} cards ({report.created} new, {report.updated} updated) "
                  f"into {db.location}")
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


def _migrate(args: argparse.Namespace) -> int:
    from app.kanban.copy import copy_board
    from app.kanban.postgres import PostgresDatabase

    settings = _settings(args.target)
    if settings is None:
        return EXIT_USAGE
    if settings.kanban_db_url is None:
        print("memory-mcp: --to must be a postgresql:// URL", file=sys.stderr)
        return EXIT_USAGE
    source = Path(args.source).expanduser()
    target = PostgresDatabase(settings.kanban_db_url)
    try:
        report = copy_board(source, target)
    except AppError as exc:
        print(f"memory-mcp: {exc}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        target.close()
    print(f"copied {report.tasks} tasks, {report.notes} notes, {report.history} history entries, {report.jobs} jobs "
          f"and {report.audit_entries} audit entries from {source} to {target.location}; "
          f"the next new task is TASK-{report.next_task_number:05d}")
    return EXIT_OK


def add_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``kanban import-obsidian PATH``, ``kanban export-obsidian PATH`` and ``kanban migrate``."""
    kanban = commands.add_parser("kanban", help="kanban board maintenance (works on the board's database)")
    sub = kanban.add_subparsers(dest="kanban_command", required=True, metavar="ACTION")
    for name, text in (
        ("import-obsidian", "import an Obsidian vault (Kanban.md + task/<id>.md) into the board"),
        ("export-obsidian", "write the board as an Obsidian vault (Kanban.md + task/<id>.md)"),
    ):
        action = sub.add_parser(name, help=text)
        action.add_argument("path", help="vault directory or path of its Kanban.md")
        action.add_argument("--kanban-db", dest="kanban_db",
                            help="kanban SQLite file or postgresql:// URL (default from settings)")
        action.set_defaults(handler=_run)
    migrate = sub.add_parser("migrate", help="copy a SQLite board into an empty PostgreSQL board")
    migrate.add_argument("--from", dest="source", required=True, metavar="SQLITE_FILE", help="the SQLite board")
    migrate.add_argument("--to", dest="target", required=True, metavar="POSTGRESQL_URL",
                         help="postgresql://user@host/db of an empty board (created there if absent)")
    migrate.set_defaults(handler=_migrate)
