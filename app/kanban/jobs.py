"""The job runner: one fixed command, started without a shell, supervised, killed as a group.

A job is a process group (``start_new_session=True``): on timeout or shutdown the whole group gets
SIGTERM, then SIGKILL after the grace period, so a background grandchild cannot outlive its job.
A job inherits only its stdio (``launch_argv``) and gets SIGTERM when the server dies; what a killed
server leaves behind, the next one kills at start (``recover``) and records as abandoned.
The server never waits for a job on the event loop: ``trigger`` returns as soon as the process runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import signal
import uuid
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from app.errors import InvalidInput
from app.kanban.errors import JobRefusedAsRoot
from app.kanban.job_audit import JobAudit
from app.kanban.job_command import LAUNCH_FAILED, JobCommand, check_args, job_env, launch_argv, not_configured
from app.kanban.job_records import JobOutcome, JobRecords
from app.kanban.models import Job
from app.kanban.output import CappedBuffer, drain
from app.kanban.store import now_ms
from app.settings import Settings

logger = logging.getLogger(__name__)

MAX_WAIT_S = 60.0
DRAIN_AFTER_EXIT_S = 1.0


@dataclass
class _Running:
    job_id: str
    task_id: str | None
    process: asyncio.subprocess.Process
    done: asyncio.Event = field(default_factory=asyncio.Event)
    supervisor: asyncio.Task[None] | None = None
    stop_reason: str | None = None
    actor: str | None = None
    args: list[str] = field(default_factory=list)
    started_ms: int = 0


def _killpg(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def running_as_root() -> bool:
    return os.geteuid() == 0


def bound_wait(wait_s: float | None) -> float:
    if wait_s is None:
        return 0.0
    if math.isnan(wait_s) or wait_s < 0:
        raise InvalidInput("wait_s must be between 0 and 60 seconds")
    return min(float(wait_s), MAX_WAIT_S)


class JobRunner:
    """Starts and supervises jobs; at most ``settings.job_max_concurrent`` at once."""

    def __init__(self, settings: Settings, records: JobRecords, command: JobCommand | None,
                 audit: JobAudit | None = None) -> None:
        self.settings = settings
        self.records = records
        self.command = command
        self.audit = audit
        self._running: dict[str, _Running] = {}
        self._lock = asyncio.Lock()

    @property
    def running_count(self) -> int:
        return len(self._running)

    async def trigger(self, task_id: str | None, args: list[str] | None, wait_s: float | None,
                      actor: str | None) -> Job:
        """Start the job (or return the one already running) and optionally wait for its end.

        Raises:
            JobNotConfigured: no command is configured. InvalidInput: bad arguments or wait.
            JobRefusedAsRoot: the server runs as root without ``jobs_allow_root``.
        """
        if self.command is None:
            raise not_configured()
        values, wait = check_args(args), bound_wait(wait_s)
        if running_as_root() and not self.settings.jobs_allow_root:
            self._audit(actor, task_id, values, status="refused", reason="the server runs as root")
            raise JobRefusedAsRoot(
                "jobs never run as root: run memory-mcp as an ordinary user, or set MEMORY_MCP_JOBS_ALLOW_ROOT=true "
                "if the job really must run as root"
            )
        async with self._lock:
            if len(self._running) >= self.settings.job_max_concurrent:
                current = self._pick_running(task_id)
                job = await asyncio.to_thread(self.records.get, current.job_id)
                self._audit(actor, task_id, values, status="already_running", job_id=job.id)
                return job.model_copy(update={"already_running": True})
            entry = await self._start(self.command, task_id, values, actor)
        if isinstance(entry, Job):  # the process could not be started; the record says why
            self._audit(actor, task_id, values, status=entry.status, job_id=entry.id, reason=entry.reason)
            return entry
        if wait > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(entry.done.wait(), wait)
        return await asyncio.to_thread(self.records.get, entry.job_id)

    def _audit(self, actor: str | None, task_id: str | None, args: list[str], *, status: str,
               job_id: str | None = None, exit_code: int | None = None, duration_ms: int | None = None,
               reason: str | None = None) -> None:
        if self.audit is not None:
            self.audit.record(at_ms=now_ms(), actor=actor, task_id=task_id, args=args, status=status,
                              job_id=job_id, exit_code=exit_code, duration_ms=duration_ms, reason=reason)

    def _pick_running(self, task_id: str | None) -> _Running:
        entries = list(self._running.values())
        same_task = [e for e in entries if task_id is not None and e.task_id == task_id]
        return (same_task or entries)[-1]

    async def _start(self, command: JobCommand, task_id: str | None, args: list[str],
                     actor: str | None) -> _Running | Job:
        job_id = f"job-{uuid.uuid4().hex[:16]}"
        argv = command.build_argv(task_id, args)
        job = Job(id=job_id, task_id=task_id, argv=argv, status="running", started_ms=now_ms(), actor=actor)
        await asyncio.to_thread(self.records.insert, job)
        try:
            with warnings.catch_warnings():
                # uvloop runs the at-fork hooks, and LanceDB's warns that it is not fork-safe; the child
                # execs the launcher at once, so nothing of LanceDB runs in it.
                warnings.filterwarnings("ignore", message="lance is not fork-safe", category=UserWarning)
                # The same from the LanceDB this project pins, printed by the child into the server's log.
                warnings.filterwarnings("ignore", message="lancedb fork support is experimental",
                                        category=RuntimeWarning)
                process = await asyncio.create_subprocess_exec(
                    *launch_argv(argv),
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                    cwd=command.cwd,
                    env=job_env(task_id, job_id),
                    start_new_session=True,
                    close_fds=True,  # ignored by uvloop: the launcher closes what the job must not hold
                )
        except OSError as exc:
            outcome = JobOutcome("failed", None, now_ms(), "", "", 0, 0, False, f"could not start: {exc}")
            return await asyncio.to_thread(self.records.finish, job_id, outcome)
        await asyncio.to_thread(self.records.set_process, job_id, process.pid, process.pid)
        logger.info("job %s started (pid %s, task %s)", job_id, process.pid, task_id)
        entry = _Running(job_id=job_id, task_id=task_id, process=process, actor=actor, args=args,
                         started_ms=job.started_ms)
        self._running[job_id] = entry
        entry.supervisor = asyncio.create_task(self._supervise(entry), name=f"job-{job_id}")
        return entry

    async def _supervise(self, entry: _Running) -> None:
        process = entry.process
        out, err = CappedBuffer(self.settings.job_output_cap_bytes), CappedBuffer(self.settings.job_output_cap_bytes)
        readers = asyncio.gather(drain(process.stdout, out), drain(process.stderr, err))
        status, reason = "succeeded", None
        try:
            try:
                await asyncio.wait_for(process.wait(), self.settings.job_timeout_s)
            except TimeoutError:
                status, reason = "timed_out", f"killed after the {self.settings.job_timeout_s:g} s timeout"
                await self._terminate(process)
            await self._finish_group(process.pid, readers)
            code = process.returncode
            if status == "succeeded" and code != 0:
                status = "failed"
                reason = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
                if code == LAUNCH_FAILED and err.text().startswith("could not start"):
                    reason = err.text().strip()  # the launcher's exec failed: say why, as a failed spawn did
            if entry.stop_reason is not None and status != "timed_out":
                status, reason = "failed", entry.stop_reason
            outcome = JobOutcome(status, code, now_ms(), out.text(), err.text(), out.total, err.total,
                                 out.truncated or err.truncated, reason)
            await asyncio.to_thread(self.records.finish, entry.job_id, outcome)
            logger.info("job %s ended: %s (exit %s)", entry.job_id, status, code)
            self._audit(entry.actor, entry.task_id, entry.args, status=status, job_id=entry.job_id, exit_code=code,
                        duration_ms=outcome.ended_ms - entry.started_ms, reason=reason)
        except Exception:
            logger.exception("job %s supervision failed", entry.job_id)
        finally:
            self._running.pop(entry.job_id, None)
            entry.done.set()

    async def _terminate(self, process: asyncio.subprocess.Process) -> None:
        """SIGTERM to the group, SIGKILL after the grace period, then reap the leader."""
        _killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), self.settings.job_kill_grace_s)
        # Also after a quick exit of the leader: a grandchild may ignore SIGTERM.
        _killpg(process.pid, signal.SIGKILL)
        await process.wait()

    async def _finish_group(self, pgid: int, readers: asyncio.Future[list[None]]) -> None:
        """The leader is gone: collect the rest of the output; nothing of the group outlives the job."""
        try:
            await asyncio.wait_for(asyncio.shield(readers), DRAIN_AFTER_EXIT_S)
        except TimeoutError:
            _killpg(pgid, signal.SIGKILL)  # a background child still holds the pipes open
            try:
                await asyncio.wait_for(asyncio.shield(readers), DRAIN_AFTER_EXIT_S)
            except TimeoutError:
                readers.cancel()
        _killpg(pgid, signal.SIGKILL)

    async def recover(self) -> int:
        """Mark jobs a dead server left ``running`` as abandoned, killing their group if still alive."""
        stale = await asyncio.to_thread(self.records.running)
        for job_id, pgid in stale:
            killed = pgid is not None and await asyncio.to_thread(kill_job_group, pgid, job_id)
            reason = "the server stopped while the job ran" + ("; its processes were killed" if killed else "")
            await asyncio.to_thread(self.records.abandon, job_id, now_ms(), reason)
            logger.warning("job %s marked abandoned (%s)", job_id, reason)
        return len(stale)

    async def close(self) -> None:
        """Stop every running job: SIGTERM, SIGKILL after the grace period, records written."""
        entries = list(self._running.values())
        for entry in entries:
            entry.stop_reason = "canceled: the server shut down while the job ran"
        await asyncio.gather(*(self._terminate(e.process) for e in entries), return_exceptions=True)
        supervisors = [e.supervisor for e in entries if e.supervisor is not None]
        if supervisors:
            await asyncio.wait(supervisors, timeout=self.settings.job_kill_grace_s + 2 * DRAIN_AFTER_EXIT_S + 5)


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat_text = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat_text.rsplit(")", 1)[-1].split()
        if len(fields) > 2 and fields[2] == str(pgid):
            members.append(int(entry.name))
    return members


def kill_job_group(pgid: int, job_id: str) -> bool:
    """SIGKILL the group only if one of its processes carries this job's id (pgids get reused)."""
    marker = f"MEMORY_MCP_JOB_ID={job_id}".encode()
    for pid in _group_members(pgid):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if marker in environ.split(b"\0"):
            _killpg(pgid, signal.SIGKILL)
            return True
    return False
