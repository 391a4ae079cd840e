"""A real PostgreSQL for the tests: one server per session in a temp dir, a fresh database per test.

PostgreSQL refuses to run as root, so as root (CI) ``initdb`` and ``pg_ctl`` run as the ``postgres``
user through ``runuser``; as any other user they run as that user. The server listens on a free
loopback port with trust auth and its socket in the temp dir; durability is off (a test server).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from tests.support.server import free_port

SEARCH_PATH = "/usr/local/bin:/usr/lib/postgresql/15/bin:/usr/bin"
START_TIMEOUT_S = 60


@dataclass(frozen=True)
class PostgresServer:
    port: int
    directory: Path
    start_s: float

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"


class PostgresUnavailable(RuntimeError):
    """The machine cannot run a test PostgreSQL; the message says what is missing."""


def _binary(name: str) -> str:
    found = shutil.which(name, path=SEARCH_PATH + ":" + os.environ.get("PATH", ""))
    if found is None:
        raise PostgresUnavailable(f"the PostgreSQL tests need {name!r} (PostgreSQL 15 server binaries) on "
                                  f"{SEARCH_PATH} or PATH; install the postgresql package")
    return found


def _as_server_user(argv: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


def _run(argv: list[str], what: str) -> None:
    done = subprocess.run(_as_server_user(argv), capture_output=True, text=True, timeout=START_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise PostgresUnavailable(f"{what} failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}")


def _give_to_server_user(directory: Path) -> None:
    if os.geteuid() != 0:
        return
    try:
        user = pwd.getpwnam("postgres")
    except KeyError:
        raise PostgresUnavailable("PostgreSQL refuses to run as root and there is no 'postgres' user to run it "
                                  "as; create one (useradd --system postgres)") from None
    os.chown(directory, user.pw_uid, user.pw_gid)


@contextmanager
def temporary_postgres() -> Iterator[PostgresServer]:
    """initdb + pg_ctl start in a new temp dir, on a free loopback port; stopped and removed at the end.

    Raises:
        PostgresUnavailable: no server binaries, no ``postgres`` user, or the server did not start.
    """
    initdb, pg_ctl = _binary("initdb"), _binary("pg_ctl")
    started = time.monotonic()
    directory = Path(tempfile.mkdtemp(prefix="memory-mcp-pg-"))
    data = directory / "data"
    try:
        _give_to_server_user(directory)
        _run([initdb, "-D", str(data), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C", "--no-sync"],
             "initdb")
        port = _start(pg_ctl, directory)
        yield PostgresServer(port=port, directory=directory, start_s=time.monotonic() - started)
    finally:
        if (data / "postmaster.pid").exists():
            subprocess.run(_as_server_user([pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop"]),
                           capture_output=True, timeout=START_TIMEOUT_S, check=False)
        shutil.rmtree(directory, ignore_errors=True)


def _start(pg_ctl: str, directory: Path, attempts: int = 3) -> int:
    """Start the server on a free port; a port another test worker took in the meantime means another try."""
    for attempt in range(attempts):
        port = free_port()
        try:
            _start_on(pg_ctl, directory, port)
        except PostgresUnavailable:
            if attempt == attempts - 1:
                raise
            continue
        return port
    raise AssertionError("unreachable")


def _start_on(pg_ctl: str, directory: Path, port: int) -> None:
    options = (f"-p {port} -k {directory} -c listen_addresses=127.0.0.1 -c fsync=off "
               "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200")
    _run([pg_ctl, "-D", str(directory / "data"), "-l", str(directory / "server.log"), "-o", options, "-w",
          "-t", str(START_TIMEOUT_S), "start"], "pg_ctl start")


def stop(server: PostgresServer) -> None:
    """Stop the server (its clients' connections end), keeping its data for :func:`start_again`.

    A fast shutdown, not an immediate one: with fsync and synchronous commits off, a crash loses commits."""
    _run([_binary("pg_ctl"), "-D", str(server.directory / "data"), "-m", "fast", "-w", "stop"], "pg_ctl stop")


def start_again(server: PostgresServer) -> None:
    """Start a stopped server on its own port again."""
    _start_on(_binary("pg_ctl"), server.directory, server.port)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL for the whole session; a machine that cannot run one fails the test with the reason."""
    try:
        with temporary_postgres() as server:
            yield server
    except PostgresUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh, empty database on the session's server; dropped after the test."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(postgres_server.url(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')  # a generated name, never input
    yield postgres_server.url(name)
    with psycopg.connect(postgres_server.url(), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgres"])
def kanban_db(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """Where a board test's board lives: a SQLite file in tmp_path, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return tmp_path / "kanban.sqlite3"
    url: str = request.getfixturevalue("postgres_url")
    return url
