"""``memory-mcp backup [FILE]`` and ``memory-mcp restore FILE``: memories and the board in one archive.

The archive (``.tar.gz``) holds ``memories.jsonl`` (the ``export`` format, vectors included, so a restore
with the same model embeds nothing), ``board.sqlite3`` (a consistent copy made with SQLite's backup API,
safe beside a running server), the jobs' audit log when there is one, and ``manifest.json``.

A restore adds the memories the table lacks (like ``import``) and puts the board back. A board that
already holds tasks is replaced only with ``--replace-board`` (stop the server first); without it the
memories are still restored, the board is left as it was, and the command says so and exits 1.
Exit codes: 0 ok, 1 failed, 2 usage.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import sqlite3
import sys
import tarfile
import tempfile
import time
from contextlib import closing
from pathlib import Path
from typing import Any

from app.cli.data import vector_mode, vector_options
from app.cli.env import EXIT_OK, EXIT_REFUSED, EXIT_USAGE
from app.cli.output import command_seconds

MEMORIES = "memories.jsonl"
BOARD = "board.sqlite3"
AUDIT = "job-audit.jsonl"
MANIFEST = "manifest.json"


class BackupError(Exception):
    """A failure with the exit code the command ends with."""

    def __init__(self, message: str, exit_code: int = EXIT_REFUSED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def _settings(args: argparse.Namespace) -> Any:
    from pydantic import ValidationError

    from app.settings import Settings, describe_errors

    overrides = {field: value for field, value in (("db_path", args.db), ("kanban_db", args.kanban_db)) if value}
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise BackupError("; ".join(describe_errors(exc)), EXIT_USAGE) from None


def _copy_sqlite(source: Path, target: Path) -> int:
    """Copy a SQLite database page by page (consistent while others write); the number of tasks in it."""
    with closing(sqlite3.connect(source.resolve().as_uri() + "?mode=ro", uri=True)) as src, \
            closing(sqlite3.connect(target)) as dst:
        src.backup(dst)
        return _count_tasks(dst)


def _count_tasks(conn: sqlite3.Connection) -> int:
    try:
        return int(conn.execute("SELECT count(*) FROM tasks").fetchone()[0])
    except sqlite3.OperationalError:  # no board schema yet
        return 0


def backup(args: argparse.Namespace) -> int:
    from app.kanban.job_audit import audit_path
    from app.memory.export import TableMissing, export_jsonl

    settings = _settings(args)
    target = Path(args.file or time.strftime("memory-mcp-backup-%Y%m%d-%H%M%S.tar.gz")).expanduser()
    with tempfile.TemporaryDirectory(prefix="memory-mcp-backup-") as tmp:
        work = Path(tmp)
        with (work / MEMORIES).open("w", encoding="utf-8") as out:
            try:
                rows = export_jsonl(settings, out, vectors=True).rows
            except TableMissing:
                rows = 0  # no memory yet: the archive holds the board alone
        board = settings.kanban_db_path
        tasks = _copy_sqlite(board, work / BOARD) if board.is_file() else None
        audit = audit_path(board)
        manifest = {"format": 1, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "memories": rows,
                    "table": settings.table, "tasks": tasks, "job_audit": audit.is_file()}
        (work / MANIFEST).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
        partial = target.with_name(target.name + ".partial")  # never a half-written archive under the real name
        with tarfile.open(partial, "w:gz") as archive:
            for name in (MANIFEST, MEMORIES, *([BOARD] if tasks is not None else [])):
                archive.add(work / name, arcname=name)
            if audit.is_file():
                archive.add(audit, arcname=AUDIT)
        os.replace(partial, target)
    board_text = "no board" if tasks is None else f"the board ({tasks} tasks)"
    print(f"backed up {rows} memories and {board_text} to {target} in {command_seconds():.1f} s",
          file=sys.stderr)
    return EXIT_OK


def _members(archive: tarfile.TarFile) -> dict[str, tarfile.TarInfo]:
    members = {member.name: member for member in archive.getmembers() if member.isfile()}
    if MANIFEST not in members or MEMORIES not in members:
        raise BackupError(f"not a memory-mcp backup: no {MANIFEST} and {MEMORIES} in it", EXIT_USAGE)
    return members


def _tasks_in_the_way(board: Path, replace: bool) -> int:
    """How many tasks the board to be replaced holds (0 when it may be replaced)."""
    if not board.is_file() or replace:
        return 0
    with closing(sqlite3.connect(board.resolve().as_uri() + "?mode=ro", uri=True)) as conn:
        return _count_tasks(conn)


async def _import(lines: io.TextIOWrapper, settings: Any, vectors: Any) -> Any:
    from app.memory.embeddings import create_embedder
    from app.memory.transfer import import_jsonl

    embedder = create_embedder(settings)
    await embedder.load()
    try:
        return await import_jsonl(lines, settings, embedder, vectors=vectors)
    finally:
        await embedder.close()


def restore(args: argparse.Namespace) -> int:
    settings = _settings(args)
    source = Path(args.file).expanduser()
    board = settings.kanban_db_path
    try:
        archive = tarfile.open(source, "r:gz")  # noqa: SIM115 - the with below closes it
    except (OSError, tarfile.TarError) as exc:
        raise BackupError(f"cannot read {source}: {exc}", EXIT_USAGE) from None
    with archive:
        members = _members(archive)
        in_the_way = _tasks_in_the_way(board, args.replace_board) if BOARD in members else 0
        memories = archive.extractfile(members[MEMORIES])
        assert memories is not None  # noqa: S101 - a regular file member
        report = asyncio.run(_import(io.TextIOWrapper(memories, encoding="utf-8"), settings, vector_mode(args)))
        tasks = None
        if in_the_way:
            # The memories are added (nothing of them is replaced); the board only with --replace-board.
            print(f"restored {report.written} memories ({report.skipped_existing} already there) into "
                  f"{report.db_path}/{report.table}, but not the board: the board at {board} already holds "
                  f"{in_the_way} tasks and was left as it was; pass --replace-board to replace it with the "
                  f"backup's (stop the server first). {command_seconds():.1f} s", file=sys.stderr)
            return EXIT_REFUSED
        if BOARD in members:
            with tempfile.TemporaryDirectory(prefix="memory-mcp-restore-") as tmp:
                copy = Path(tmp) / BOARD
                board_file = archive.extractfile(members[BOARD])
                assert board_file is not None  # noqa: S101
                copy.write_bytes(board_file.read())
                board.parent.mkdir(parents=True, exist_ok=True)
                tasks = _copy_sqlite(copy, board)
        if AUDIT in members:
            from app.kanban.job_audit import audit_path

            audit = archive.extractfile(members[AUDIT])
            assert audit is not None  # noqa: S101
            audit_path(board).write_bytes(audit.read())
    board_text = "no board in the backup" if tasks is None else f"the board ({tasks} tasks) into {board}"
    print(f"restored {report.written} memories ({report.skipped_existing} already there) into "
          f"{report.db_path}/{report.table} and {board_text} in {command_seconds():.1f} s", file=sys.stderr)
    return EXIT_OK


def _run(handler: Any) -> Any:
    def wrapped(args: argparse.Namespace) -> int:
        from app.errors import AppError

        try:
            result: int = handler(args)
            return result
        except BackupError as exc:
            print(f"memory-mcp: {exc}", file=sys.stderr)
            return exc.exit_code
        except (AppError, OSError, sqlite3.Error) as exc:
            print(f"memory-mcp: {exc}", file=sys.stderr)
            return EXIT_REFUSED

    return wrapped


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for name, text in (("backup", "write memories and the board to one .tar.gz archive"),
                       ("restore", "add the memories of a backup and put its board back")):
        parser = commands.add_parser(name, help=text, description=text + ". " + (
            "Safe beside a running server." if name == "backup" else "Stop the server first."))
        if name == "backup":
            parser.add_argument("file", nargs="?", help="archive to write (default memory-mcp-backup-<time>.tar.gz)")
        else:
            parser.add_argument("file", help="archive written by memory-mcp backup")
            parser.add_argument("--replace-board", action="store_true",
                                help="replace a board that already holds tasks")
            vector_options(parser)
        parser.add_argument("--db", help="LanceDB directory or URI (default: MEMORY_MCP_DB_PATH)")
        parser.add_argument("--kanban-db", help="board SQLite file (default: MEMORY_MCP_KANBAN_DB)")
        parser.set_defaults(handler=_run(backup if name == "backup" else restore))
