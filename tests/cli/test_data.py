"""``memory-mcp export|import|reembed|doctor`` as real processes: exit codes, output, progress."""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import httpx
import lancedb
import pytest

from app.cli import main
from app.cli.data import ProgressBar
from app.memory.store.locks import LOCK_DIR_NAME, LOCK_TARGET_NAME, STALE_S
from app.settings import Settings
from tests.conftest import SettingsFactory
from tests.memory.test_transfer import bulk_store
from tests.support.server import LiveServer, free_port

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str  # raw: carriage returns of the progress bar are kept


def cli(tmp_path: Path, *words: str, stdin: str | None = None) -> Result:
    """Run ``python -m app.cli`` with the hash embedder and data in tmp_path only."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_MCP_") and k != "JINA_API_KEY"}
    env.update(MEMORY_MCP_DB_PATH=str(tmp_path / "lancedb"), MEMORY_MCP_KANBAN_DB=str(tmp_path / "kanban.sqlite3"),
               MEMORY_MCP_EMBEDDING_PROVIDER="hash", MEMORY_MCP_PORT=str(free_port()),
               PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-m", "app.cli", *words], env=env, cwd=tmp_path,
                          input=None if stdin is None else stdin.encode(), capture_output=True, timeout=60)
    return Result(done.returncode, done.stdout.decode(), done.stderr.decode())


@pytest.fixture
def run(make_settings: SettingsFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> Callable[..., Result]:
    """``memory-mcp …`` in this process (LanceDB is imported once): same env as ``cli``."""
    make_settings()  # clears MEMORY_MCP_* and moves to tmp_path
    monkeypatch.setenv("MEMORY_MCP_DB_PATH", str(tmp_path / "lancedb"))
    monkeypatch.setenv("MEMORY_MCP_KANBAN_DB", str(tmp_path / "kanban.sqlite3"))
    monkeypatch.setenv("MEMORY_MCP_EMBEDDING_PROVIDER", "hash")
    monkeypatch.setenv("MEMORY_MCP_PORT", str(free_port()))

    def invoke(*words: str, stdin: str | None = None) -> Result:
        if stdin is not None:
            monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        capsys.readouterr()
        code = main(list(words))
        out = capsys.readouterr()
        return Result(code, out.out, out.err)

    return invoke


def rows(db_path: Path, table: str = "memories") -> list[dict[str, object]]:
    handle = lancedb.connect(str(db_path), read_consistency_interval=timedelta(0)).open_table(table)
    return sorted(handle.to_arrow().to_pylist(), key=lambda row: str(row["id"]))


@pytest.fixture
def store(make_settings: SettingsFactory) -> Settings:
    settings = make_settings()
    bulk_store(settings, 1200)
    return settings


@pytest.mark.slow
def test_export_and_import_commands_round_trip_and_a_second_import_adds_nothing(
        store: Settings, tmp_path: Path, run: Callable[..., Result]) -> None:
    exported = cli(tmp_path, "export", "--vectors", "--out", "all.jsonl")
    assert exported.returncode == 0, exported.stderr
    assert "exported 1200 rows" in exported.stderr and not (tmp_path / "all.jsonl.partial").exists()
    assert len((tmp_path / "all.jsonl").read_text(encoding="utf-8").splitlines()) == 1201

    first = cli(tmp_path, "import", "all.jsonl", "--db", "copy", "--progress", "--batch", "300")
    second = run("import", "all.jsonl", "--db", "copy", "--json")

    assert first.returncode == 0, first.stderr
    assert "imported 1200 new rows" in first.stdout and "1200 vectors reused" in first.stdout
    assert "\r" in first.stderr and "1200/1200  100%" in first.stderr and "ETA" in first.stderr
    assert second.returncode == 0 and json.loads(second.stdout)["written"] == 0
    assert rows(tmp_path / "copy") == rows(store.db_path)


def test_export_to_stdout_pipes_into_import_from_stdin(make_settings: SettingsFactory,
                                                       run: Callable[..., Result]) -> None:
    bulk_store(make_settings(), 40)
    exported = run("export", "--scope", "global")
    imported = run("import", "-", "--db", "copy", "--json", stdin=exported.stdout)
    assert exported.returncode == 0 and imported.returncode == 0, imported.stderr
    report = json.loads(imported.stdout)
    assert report["written"] == 14 and report["reembedded"] == 14  # no --vectors: texts are embedded again


def test_import_into_another_model_asks_for_reembed_or_keep_vectors_and_says_which_model_embedded(
        make_settings: SettingsFactory, run: Callable[..., Result]) -> None:
    bulk_store(make_settings(), 10)
    exported = run("export", "--vectors", "--out", "all.jsonl")
    refused = run("import", "all.jsonl", "--db", "small", "--dimensions", "64")
    kept_wrong = run("import", "all.jsonl", "--db", "small", "--dimensions", "64", "--keep-vectors")
    done = run("import", "all.jsonl", "--db", "small", "--dimensions", "64", "--reembed")
    assert exported.returncode == 0 and (refused.returncode, kept_wrong.returncode) == (1, 1)
    assert "hash/hash-bow-v1 (256-d)" in refused.stderr and "pass --reembed" in refused.stderr
    assert "256-d, but the target embeds with hash/hash-bow-v1 (64-d)" in kept_wrong.stderr
    assert done.returncode == 0, done.stderr
    assert "10 re-embedded with hash/hash-bow-v1 (64-d)" in done.stdout


def test_data_commands_fail_with_exit_1_and_a_reason(tmp_path: Path, run: Callable[..., Result]) -> None:
    (tmp_path / "notes.txt").write_text("just text\n", encoding="utf-8")
    missing_db = cli(tmp_path, "export", "--db", "nowhere")  # one real process: the exit code reaches the shell
    missing_file = run("import", "absent.jsonl")
    not_export = run("import", "notes.txt")
    bad_table = run("export", "--table", "no spaces allowed")
    assert (missing_db.returncode, missing_file.returncode, not_export.returncode) == (1, 1, 1)
    assert "no LanceDB directory" in missing_db.stderr and "absent.jsonl" in missing_file.stderr
    assert "export header" in not_export.stderr
    assert bad_table.returncode == 2


def test_reembed_command_builds_a_new_table_and_prints_how_to_switch(make_settings: SettingsFactory,
                                                                     run: Callable[..., Result]) -> None:
    settings = make_settings()
    bulk_store(settings, 30)
    result = run("reembed", "--provider", "hash", "--dimensions", "64")
    assert result.returncode == 0, result.stderr
    assert "MEMORY_MCP_TABLE=memories_hash_64" in result.stdout
    assert "MEMORY_MCP_EMBEDDING_DIMENSIONS=64" in result.stdout
    assert len(rows(settings.db_path, "memories_hash_64")) == 30 and len(rows(settings.db_path)) == 30


def test_doctor_is_all_ok_on_a_healthy_store_and_exits_1_on_a_model_mismatch(
        store: Settings, tmp_path: Path, run: Callable[..., Result]) -> None:
    healthy = cli(tmp_path, "doctor", "--json")
    mismatch = run("doctor", "--dimensions", "64")
    assert healthy.returncode == 0, healthy.stdout
    report = json.loads(healthy.stdout)
    assert report["ok"] is True and {c["status"] for c in report["checks"]} == {"ok"}
    assert mismatch.returncode == 1
    assert "hash/hash-bow-v1 (256-d)" in mismatch.stdout and "(64-d)" in mismatch.stdout
    assert "fix: " in mismatch.stdout and "reembed --provider hash --dimensions 64" in mismatch.stdout


def test_doctor_reports_a_stale_write_lock(store: Settings, tmp_path: Path) -> None:
    lock = store.db_path / LOCK_DIR_NAME
    lock.mkdir()
    old = time.time() - STALE_S * 6
    os.utime(lock, (old, old))
    result = cli(tmp_path, "doctor", "--json")
    assert result.returncode == 0  # a warning: the next writer takes a stale lock over
    [check] = [c for c in json.loads(result.stdout)["checks"] if c["status"] != "ok"]
    assert check["name"] == "write_lock" and check["status"] == "warn" and "doctor --fix" in check["fix"]
    assert lock.is_dir()
    fixed = cli(tmp_path, "doctor", "--fix", "--json")
    assert f"removed the stale write lock {lock}" in fixed.stderr and not lock.exists()
    [after] = [c for c in json.loads(fixed.stdout)["checks"] if c["name"] == "write_lock"]
    assert after["status"] == "ok"


def test_doctor_fix_turns_an_earlier_versions_lock_directory_into_the_plugins_lock_file(
        store: Settings, tmp_path: Path) -> None:
    legacy = store.db_path / LOCK_TARGET_NAME
    legacy.unlink(missing_ok=True)  # as an earlier memory-mcp left it: a directory at the file's path
    legacy.mkdir()
    old = time.time() - STALE_S * 6
    os.utime(legacy, (old, old))
    [check] = [c for c in json.loads(cli(tmp_path, "doctor", "--json").stdout)["checks"] if c["name"] == "write_lock"]
    assert check["status"] == "warn" and "earlier memory-mcp" in check["detail"]
    fixed = cli(tmp_path, "doctor", "--fix")
    assert "replaced the lock directory" in fixed.stderr
    assert legacy.is_file() and legacy.stat().st_size == 0


def test_doctor_sees_a_running_server_and_its_store_beside_it(live_server: LiveServer,
                                                              run: Callable[..., Result]) -> None:
    result = run("doctor", "--url", live_server.url, "--json")
    assert result.returncode == 0, result.stdout
    [server] = [c for c in json.loads(result.stdout)["checks"] if c["name"] == "server"]
    assert server["status"] == "ok" and "memory-mcp server answers" in server["detail"]


class _NotUs(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self.send_response(404)
        self.end_headers()

    def log_message(self, *_: object) -> None:
        """Quiet."""


@pytest.fixture
def other_program() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _NotUs)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_doctor_says_when_the_port_is_taken_by_something_else(store: Settings, other_program: str,
                                                               run: Callable[..., Result]) -> None:
    result = run("doctor", "--url", other_program)
    assert result.returncode == 1
    assert "taken by something else" in result.stdout and "MEMORY_MCP_PORT" in result.stdout


def test_progress_line_shows_count_percent_and_eta() -> None:
    assert ProgressBar.line(3000, 10000, 6.0) == "  3000/10000   30%  ETA 14s   "
    assert ProgressBar.line(0, None, 1.2) == "  0 rows  1s"


def test_import_beside_a_running_server_loses_no_write_of_either(live_server: LiveServer, tmp_path: Path,
                                                                  make_settings: SettingsFactory,
                                                                  run: Callable[..., Result]) -> None:
    other = make_settings(db_path=tmp_path / "other")
    bulk_store(other, 600)
    assert run("export", "--db", str(other.db_path), "--vectors", "--out", "dump.jsonl").returncode == 0
    statuses: list[int] = []

    def remember_meanwhile() -> None:
        with httpx.Client(base_url=live_server.url, timeout=30) as client:
            for i in range(30):
                statuses.append(client.post("/api/lancedb/memories", json={"text": f"live write {i}"}).status_code)

    writer = threading.Thread(target=remember_meanwhile)
    writer.start()
    result = run("import", "dump.jsonl", "--batch", "50")
    writer.join(timeout=60)

    assert result.returncode == 0, result.stderr
    assert len(statuses) == 30 and all(200 <= status < 300 for status in statuses)
    asyncio.run(live_server.flush_memories())  # the acknowledged live writes, into the table
    texts = [str(row["text"]) for row in rows(live_server.settings.db_path)]
    assert len(texts) == 630 and sum(text.startswith("live write") for text in texts) == 30
