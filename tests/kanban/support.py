"""Helpers for kanban tests: a real job script written into tmp_path, and process-group checks."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import psutil

PROBE_SCRIPT = '''#!{python}
"""Test job: records what it received, then behaves as its last argument says."""
import json, os, signal, subprocess, sys, time

here = os.path.dirname(os.path.abspath(__file__))
mode = sys.argv[-1] if len(sys.argv) > 1 else ""
fds = {{}}
for name in os.listdir("/proc/self/fd"):
    try:
        fds[name] = os.readlink("/proc/self/fd/" + name)
    except OSError:  # the listing's own descriptor, closed by now
        pass
record = {{"argv": sys.argv, "env": dict(os.environ), "cwd": os.getcwd(),
          "stdin": os.readlink("/proc/self/fd/0"), "pgid": os.getpgid(0), "fds": fds}}
if mode == "hang":
    # A grandchild that ignores SIGTERM and keeps the stdout pipe open: only a group SIGKILL ends it.
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(3600)"
    record["grandchild"] = subprocess.Popen([sys.executable, "-c", code]).pid
with open(os.path.join(here, "probe-" + os.environ["MEMORY_MCP_JOB_ID"] + ".json"), "w") as f:
    json.dump(record, f)
if mode == "fail":
    print("it broke", file=sys.stderr)
    sys.exit(3)
if mode == "flood":
    out = sys.stdout.buffer
    out.write(b"HEAD-MARK")
    chunk = b"x" * 65536
    for _ in range(80):
        out.write(chunk)
    out.write(b"TAIL-MARK")
    sys.stderr.buffer.write(b"e" * 300000)
    sys.exit(0)
if mode in ("hang", "slow"):
    time.sleep(3600 if mode == "hang" else 30)
print("hello from the job")
print("a warning", file=sys.stderr)
'''


def write_job_script(directory: Path, name: str = "job.py", mode: int = 0o755) -> Path:
    """The probe script, executable, owned by us; returns its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(PROBE_SCRIPT.format(python=sys.executable))
    path.chmod(mode)
    return path


def read_probe(script: Path, job_id: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((script.parent / f"probe-{job_id}.json").read_text())
    return data


def live_group_members(pgid: int) -> list[psutil.Process]:
    """Processes still alive (zombies count as dead) in the process group ``pgid``."""
    members = []
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                members.append(proc)
        except (ProcessLookupError, psutil.Error):
            continue
    return members


def wait_gone(pgid: int, timeout: float = 5.0) -> list[psutil.Process]:
    """Wait (bounded) until no live process is left in ``pgid``; returns the survivors."""
    deadline = time.monotonic() + timeout
    members = live_group_members(pgid)
    while members and time.monotonic() < deadline:
        psutil.wait_procs(members, timeout=0.2)  # returns early once they exit; zombies are re-checked
        members = live_group_members(pgid)
    return members


def wait_for_probe(script: Path, job_id: str, timeout: float = 30.0) -> dict[str, Any]:
    """The probe the job writes once it runs (another process: polled with a deadline)."""
    path = script.parent / f"probe-{job_id}.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return read_probe(script, job_id)
        except (OSError, ValueError):  # not written yet, or half-written
            time.sleep(0.05)
    raise AssertionError(f"job {job_id} never wrote {path}")
