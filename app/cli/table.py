"""Table upkeep: ``rewrite-table`` rewrites a table memory-lancedb-pro cannot read (Lance format 2.2) as 2.0;
``upgrade-rows`` gives rows earlier versions wrote the plugin's smart metadata; ``repair`` brings back a table
whose newest version names files that are gone (``app/memory/repair.py``)."""

from __future__ import annotations

import argparse
import sys

from app.cli import data
from app.cli.output import print_json


def _rewrite(args: argparse.Namespace) -> int:
    from app.memory.store import connection, table_format

    settings = data._settings(args)
    uri = f"{settings.db_uri}/{settings.table}.lance"
    if settings.db_dir is not None and not (settings.db_dir / f"{settings.table}.lance").is_dir():
        raise data.UsageError(f"no table {settings.table!r} in {settings.db_uri}; check --db / --table")
    done = table_format.rewrite(uri, connection.commit_lock(settings), settings.db_dir, settings.storage_options)
    if args.json:
        print_json({"before": done.before, "after": done.after, "rows": done.rows, "version": done.version,
                    "backup": None if done.backup is None else str(done.backup)})
    elif done.before == done.after:
        print(f"nothing to do: {uri} is in Lance format {done.before}, which memory-lancedb-pro reads")
    else:
        print(f"rewrote {uri} from Lance format {done.before} to {done.after}: {done.rows} rows, "
              f"now version {done.version}")
        print(f"backup: {done.backup}" if done.backup else "the previous version stays in the table's history",
              file=sys.stderr)
    return data.EXIT_OK


def _upgrade_rows(args: argparse.Namespace) -> int:
    from app.memory.upgrade_rows import upgrade_rows

    settings = data._settings(args)
    if settings.db_dir is not None and not (settings.db_dir / f"{settings.table}.lance").is_dir():
        raise data.UsageError(f"no table {settings.table!r} in {settings.db_uri}; check --db / --table")
    report = upgrade_rows(settings, dry_run=args.dry_run, batch_size=args.batch)
    if args.json:
        print_json(report.model_dump())
        return data.EXIT_OK
    where = f"{report.db_path}/{report.table}"
    done = (f"would upgrade {report.legacy_ours}" if report.dry_run else f"upgraded {report.upgraded}")
    print(f"{done} of {report.rows} rows in {where} to memory-lancedb-pro's current format "
          f"({report.seconds:.1f} s)")
    if report.legacy_foreign:
        print(f"{report.legacy_foreign} legacy rows memory-mcp did not write are left to the plugin: "
              "`openclaw memory-pro upgrade`", file=sys.stderr)
    return data.EXIT_OK


def _repair(args: argparse.Namespace) -> int:
    from app.memory.repair import repair

    settings = data._settings(args)
    if settings.db_dir is None:
        raise data.UsageError("repair works on a local table (MEMORY_MCP_DB_PATH a directory)")
    report = repair(settings)
    if args.json:
        print_json({"summary": report.summary(), "damage": report.notes, "backup": str(report.backup or ""),
                    "restored_version": report.restored_version, "salvaged_rows": report.salvaged_rows,
                    "moved_aside": report.moved_aside})
    else:
        print(report.summary())
    return data.EXIT_OK


def add_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``rewrite-table``, ``upgrade-rows`` and ``repair``."""
    fixer = commands.add_parser(
        "repair", help="bring back a table whose newest version names missing files (copies it to backups/ first)")
    data._store_options(fixer)
    fixer.add_argument("--json", action="store_true", help="print the result as JSON")
    fixer.set_defaults(handler=lambda args: data._run(_repair, args))

    rewrite = commands.add_parser(
        "rewrite-table", help="rewrite the table in a Lance format memory-lancedb-pro can read (keeps a backup)")
    data._store_options(rewrite)
    rewrite.add_argument("--json", action="store_true", help="print the result as JSON")
    rewrite.set_defaults(handler=lambda args: data._run(_rewrite, args))

    upgrade = commands.add_parser(
        "upgrade-rows", help="give rows earlier versions wrote memory-lancedb-pro's smart metadata (metadata only)")
    data._store_options(upgrade)
    upgrade.add_argument("--dry-run", action="store_true", help="count the rows to upgrade, change nothing")
    upgrade.add_argument("--batch", type=int, default=500, help="rows per commit (default 500)")
    upgrade.add_argument("--json", action="store_true", help="print the report as JSON")
    upgrade.set_defaults(handler=lambda args: data._run(_upgrade_rows, args))
