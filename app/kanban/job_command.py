"""What a job runs and with what: the fixed command, its checked arguments and a scrubbed environment."""

from __future__ import annotations

import os
import shutil
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

from app.errors import InvalidInput
from app.kanban.errors import JobNotConfigured, UnsafeJobCommand
from app.settings import Settings

#: The child never inherits the server's PATH (which a caller's shell could have changed).
FIXED_PATH = "/usr/local/bin:/usr/bin:/bin"
#: Variables copied from the server's environment; everything else (tokens, keys, LD_PRELOAD) is dropped.
ENV_ALLOW = ("HOME", "LANG", "LC_ALL", "TZ", "USER")
MAX_ARGS = 64
MAX_ARG_CHARS = 4096


@dataclass(frozen=True)
class JobCommand:
    argv: tuple[str, ...]
    cwd: Path

    def build_argv(self, task_id: str | None, args: list[str]) -> list[str]:
        """Command, ``--``, then the task id and the caller's arguments: no value can become an option."""
        return [*self.argv, "--", *([task_id] if task_id else []), *args]


def check_args(args: list[str] | None) -> list[str]:
    """Raises: InvalidInput for NUL bytes, non-strings or too many/too long arguments."""
    values = list(args or [])
    if len(values) > MAX_ARGS:
        raise InvalidInput(f"at most {MAX_ARGS} job arguments are allowed", code="invalid_job_args")
    for value in values:
        if not isinstance(value, str) or "\x00" in value or len(value) > MAX_ARG_CHARS:
            raise InvalidInput(
                f"each job argument must be a string of at most {MAX_ARG_CHARS} characters without NUL",
                code="invalid_job_args",
            )
    return values


def job_env(task_id: str | None, job_id: str, source: dict[str, str] | None = None) -> dict[str, str]:
    environ = os.environ if source is None else source
    env = {name: environ[name] for name in ENV_ALLOW if name in environ}
    env["PATH"] = FIXED_PATH
    env["MEMORY_MCP_JOB_ID"] = job_id
    env["MEMORY_MCP_TASK_ID"] = task_id or ""
    return env


#: Runs first in every job, then execs the command. uvloop ignores ``close_fds`` and leaves the sources of
#: the child's stdio open in it, so the job itself closes everything above stdio (the server's listening
#: socket among them: a job holding it would keep the port after the server died and could accept() its
#: clients). On Linux it also asks for SIGTERM when the server dies, even by SIGKILL.
LAUNCHER = """import os, sys
# The open descriptors, listed: closing up to SC_OPEN_MAX one by one can take seconds where it is huge.
try:
    fds = [int(name) for name in os.listdir("/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd")]
except OSError:
    fds = range(3, min(os.sysconf("SC_OPEN_MAX"), 65536))
for fd in fds:
    if fd > 2:
        try:
            os.close(fd)
        except OSError:  # the listing's own descriptor, already closed
            pass
if sys.platform == "linux":
    import ctypes, signal
    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if os.getppid() != int(sys.argv[1]):  # the server died before prctl took effect
        sys.exit(143)
try:
    os.execv(sys.argv[2], sys.argv[2:])
except OSError as exc:
    sys.stderr.write(f"could not start {sys.argv[2]}: {exc.strerror}\\n")
    sys.exit(127)  # LAUNCH_FAILED
"""
LAUNCH_FAILED = 127


def launch_argv(argv: list[str]) -> list[str]:
    """What the server runs for ``argv``: the launcher (this Python, isolated, no site), then the command."""
    return [sys.executable, "-I", "-S", "-c", LAUNCHER, str(os.getpid()), *argv]


def _check_file(path: Path) -> None:
    try:
        info = path.stat()
    except OSError as exc:
        raise UnsafeJobCommand(f"job command {str(path)!r} cannot be read: {exc.strerror}") from exc
    if not stat.S_ISREG(info.st_mode):
        raise UnsafeJobCommand(f"job command {str(path)!r} is not a regular file")
    if info.st_mode & 0o022:
        raise UnsafeJobCommand(
            f"refusing job command {str(path)!r}: it is group- or world-writable (mode {info.st_mode & 0o777:o}); "
            f"run chmod go-w on it"
        )
    if info.st_uid not in (os.geteuid(), 0):
        raise UnsafeJobCommand(f"refusing job command {str(path)!r}: owned by uid {info.st_uid}, not by this user")


def load_job_command(settings: Settings) -> JobCommand | None:
    """Resolve and check the configured command once, at start-up; None when none is configured.

    Raises:
        UnsafeJobCommand: a file in the command is missing, writable by others or owned by someone else.
    """
    if not settings.job_command:
        return None
    first, *rest = settings.job_command
    program = first if os.sep in first else shutil.which(first, path=FIXED_PATH)
    if program is None:
        raise UnsafeJobCommand(f"job command {first!r} is not found on {FIXED_PATH}")
    program_path = Path(program).resolve()
    _check_file(program_path)
    script = program_path
    for element in rest:
        # Interpreter + script: the script file is what really runs, so it gets the same checks.
        if os.sep in element and Path(element).is_file():
            script = Path(element).resolve()
            _check_file(script)
            rest = [str(script) if e == element else e for e in rest]
            break
    cwd = settings.job_workdir or script.parent
    if not cwd.is_dir():
        raise UnsafeJobCommand(f"job working directory {str(cwd)!r} does not exist")
    return JobCommand(argv=(str(program_path), *rest), cwd=cwd)


def not_configured() -> JobNotConfigured:
    return JobNotConfigured("no job command configured (set MEMORY_MCP_JOB_COMMAND)")
