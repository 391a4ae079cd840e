"""The job runner with a real script: argv, environment, exit codes, timeouts, output cap, limits."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from app.errors import InvalidInput
from app.kanban import jobs
from app.kanban.errors import JobNotConfigured, JobNotFound, JobRefusedAsRoot, TaskNotFound, UnsafeJobCommand
from app.kanban.job_records import JobRecords
from app.kanban.models import Job
from app.kanban.service import KanbanService
from app.settings import Settings
from tests.kanban.conftest import audit_entries, migrated
from tests.kanban.support import read_probe, wait_gone, write_job_script

SettingsFactory = Callable[..., Settings]


@pytest.fixture
def script(tmp_path: Path) -> Path:
    return write_job_script(tmp_path / "jobs").resolve()


@pytest.fixture
def job_settings(make_settings: SettingsFactory, script: Path, kanban_db: Path | str) -> Settings:
    return make_settings(kanban_db=kanban_db, jobs_allow_root=True, job_command=[str(script)], job_timeout_s=20,
                         job_kill_grace_s=0.5)


async def test_successful_job_records_output_exit_code_and_times(job_settings: Settings, script: Path) -> None:
    async with KanbanService.open(job_settings) as kanban:
        task = await kanban.create_task("Run it", "claude-code")
        job = await kanban.trigger_job(task.id, wait_s=20, actor="lead")
        assert (job.status, job.exit_code, job.task_id, job.actor) == ("succeeded", 0, task.id, "lead")
        assert job.stdout == "hello from the job\n" and job.stderr == "a warning\n"
        assert job.ended_ms is not None and job.ended_ms >= job.started_ms
        assert not job.truncated and job.stdout_bytes == len(job.stdout)
        assert await kanban.get_job(job.id) == job
        assert [j.id for j in (await kanban.get_task(task.id)).jobs] == [job.id]
        assert [j.id for j in await kanban.list_jobs(task_id=task.id)] == [job.id]
    probe = read_probe(script, job.id)
    assert probe["argv"][1:] == ["--", task.id]
    assert probe["cwd"] == str(script.parent)
    assert probe["stdin"] == "/dev/null"
    assert probe["pgid"] == job.pid  # its own process group


@pytest.mark.parametrize("anyio_backend", [("asyncio", {}), ("asyncio", {"use_uvloop": True})],
                         ids=["asyncio", "uvloop"])
async def test_a_job_inherits_only_its_stdio_even_from_inheritable_descriptors(
    job_settings: Settings, script: Path, anyio_backend: object
) -> None:
    # What a server holds: a listening socket and a pipe, here even marked inheritable on purpose.
    listener = socket.create_server(("127.0.0.1", 0))
    read_end, write_end = os.pipe()
    for fd in (listener.fileno(), read_end, write_end):
        os.set_inheritable(fd, True)
    try:
        async with KanbanService.open(job_settings) as kanban:
            job = await kanban.trigger_job(wait_s=20)
    finally:
        listener.close()
        os.close(read_end)
        os.close(write_end)
    assert job.status == "succeeded"
    fds = read_probe(script, job.id)["fds"]
    assert sorted(fds) == ["0", "1", "2"], fds
    assert fds["0"] == "/dev/null" and fds["1"].startswith(("pipe:", "socket:"))


async def test_trigger_returns_at_once_with_a_running_job(job_settings: Settings) -> None:
    async with KanbanService.open(job_settings) as kanban:
        job = await kanban.trigger_job(args=["slow"])
        assert job.status == "running" and job.id.startswith("job-") and job.pid


async def test_non_zero_exit_is_a_failed_job_with_its_stderr(job_settings: Settings) -> None:
    async with KanbanService.open(job_settings) as kanban:
        job = await kanban.trigger_job(args=["fail"], wait_s=20)
    assert (job.status, job.exit_code, job.reason) == ("failed", 3, "exit code 3")
    assert job.stderr == "it broke\n"


async def test_timeout_kills_the_whole_process_group(make_settings: SettingsFactory, script: Path) -> None:
    settings = make_settings(jobs_allow_root=True, job_command=[str(script)], job_timeout_s=1.0, job_kill_grace_s=0.5)
    async with KanbanService.open(settings) as kanban:
        job = await kanban.trigger_job(args=["hang"], wait_s=20)
    assert job.status == "timed_out" and job.exit_code is not None and job.exit_code < 0
    assert job.ended_ms is not None and job.ended_ms - job.started_ms < 1000 * (1.0 + 0.5 + 3)
    probe = read_probe(script, job.id)
    assert probe["grandchild"]  # the SIGTERM-ignoring grandchild existed ...
    assert wait_gone(job.pid or -1) == []  # ... and nothing of the group is left


async def test_output_is_capped_keeping_head_and_tail(make_settings: SettingsFactory, script: Path) -> None:
    settings = make_settings(jobs_allow_root=True, job_command=[str(script)], job_output_cap_bytes=64 * 1024)
    async with KanbanService.open(settings) as kanban:
        job = await kanban.trigger_job(args=["flood"], wait_s=30)
    assert job.status == "succeeded" and job.truncated
    assert job.stdout_bytes == 9 + 80 * 65536 + 9 and job.stderr_bytes == 300000
    assert job.stdout.startswith("HEAD-MARK") and job.stdout.endswith("TAIL-MARK")
    assert "bytes omitted" in job.stdout
    assert len(job.stdout.encode()) < 64 * 1024 + 100 and len(job.stderr.encode()) < 64 * 1024 + 100


async def test_second_trigger_while_one_runs_returns_the_running_job(job_settings: Settings) -> None:
    async with KanbanService.open(job_settings) as kanban:
        first = await kanban.trigger_job(args=["slow"])
        second = await kanban.trigger_job(args=["other"])
        assert second.id == first.id and second.already_running and not first.already_running
        assert len(await kanban.list_jobs()) == 1
        assert kanban.health()["jobs_running"] == 1
    async with KanbanService.open(job_settings) as kanban:  # closing stopped it and wrote its record
        stopped = await kanban.get_job(first.id)
    assert stopped.status == "failed" and "shut down" in (stopped.reason or "")
    assert wait_gone(first.pid or -1) == []


async def test_shell_syntax_reaches_the_script_verbatim_as_one_argument(job_settings: Settings, script: Path) -> None:
    tricky = ["; rm -rf ~", "$(id)", "`id`", "\n id", "--output=/tmp/pwned", "-rf", "*", "~"]
    async with KanbanService.open(job_settings) as kanban:
        task = await kanban.create_task("Inject", "a")
        job = await kanban.trigger_job(task.id, args=tricky, wait_s=20)
    assert job.status == "succeeded"
    probe = read_probe(script, job.id)
    assert probe["argv"][1:] == ["--", task.id, *tricky]
    assert job.argv == [str(script), "--", task.id, *tricky]


async def test_environment_is_scrubbed_to_an_allow_list(job_settings: Settings, script: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORY_MCP_TOKEN", "fake-token-must-not-leak")
    monkeypatch.setenv("EMBEDDING_API_KEY", "fake-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "fake-secret")
    monkeypatch.setenv("PYTHONPATH", "/nowhere")
    monkeypatch.setenv("PATH", "/tmp/evil:" + os.environ["PATH"])
    async with KanbanService.open(job_settings) as kanban:
        task = await kanban.create_task("Env", "a")
        job = await kanban.trigger_job(task.id, wait_s=20)
    env = read_probe(script, job.id)["env"]
    allowed = {"PATH", "HOME", "LANG", "LC_ALL", "TZ", "USER", "MEMORY_MCP_TASK_ID", "MEMORY_MCP_JOB_ID"}
    # The interpreter itself may add LC_CTYPE when it coerces the C locale.
    assert set(env) - {"LC_CTYPE"} <= allowed
    assert env["PATH"] == "/usr/local/bin:/usr/bin:/bin"
    assert (env["MEMORY_MCP_TASK_ID"], env["MEMORY_MCP_JOB_ID"]) == (task.id, job.id)
    assert "fake" not in repr(env)


async def test_nul_in_an_argument_is_refused(job_settings: Settings) -> None:
    async with KanbanService.open(job_settings) as kanban:
        with pytest.raises(InvalidInput):
            await kanban.trigger_job(args=["a\x00b"])
        with pytest.raises(InvalidInput):
            await kanban.trigger_job(args=["x"], wait_s=-1)
        assert await kanban.list_jobs() == []


async def test_unknown_task_or_job_is_not_found(job_settings: Settings) -> None:
    async with KanbanService.open(job_settings) as kanban:
        with pytest.raises(TaskNotFound):
            await kanban.trigger_job("TASK-00099")
        with pytest.raises(JobNotFound):
            await kanban.get_job("job-nope")


async def test_no_job_command_is_a_clear_error_not_a_crash(kanban: KanbanService) -> None:
    with pytest.raises(JobNotConfigured) as caught:
        await kanban.trigger_job()
    assert "MEMORY_MCP_JOB_COMMAND" in caught.value.message
    assert kanban.health()["job_command_configured"] is False


@pytest.mark.parametrize("mode", [0o775, 0o757])
async def test_group_or_world_writable_script_is_refused_at_start(make_settings: SettingsFactory, tmp_path: Path,
                                                                  mode: int) -> None:
    script = write_job_script(tmp_path / "unsafe", mode=mode)
    with pytest.raises(UnsafeJobCommand) as caught:
        async with KanbanService.open(make_settings(jobs_allow_root=True, job_command=[str(script)])):
            pass
    assert "writable" in caught.value.message


async def test_missing_script_is_refused_at_start(make_settings: SettingsFactory, tmp_path: Path) -> None:
    with pytest.raises(UnsafeJobCommand):
        async with KanbanService.open(make_settings(jobs_allow_root=True, job_command=[str(tmp_path / "absent.sh")])):
            pass


def _stale_job(settings: Settings, job_id: str, pgid: int, server: str = f"{socket.gethostname()}:0:gone") -> None:
    """A job recorded as running by ``server`` (by default a server on this host that is gone)."""
    db = migrated(settings)
    records = JobRecords(db)
    records.insert(Job(id=job_id, task_id=None, argv=["job"], status="running", started_ms=1))
    records.set_process(job_id, pgid, pgid)
    with db.write() as conn:
        conn.execute("UPDATE jobs SET server = ? WHERE id = ?", (server, job_id))
    db.close()


@pytest.fixture
def sleepers() -> Iterator[tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]]:
    """Two process-group leaders: one carries the stale job's id, the other an unrelated one."""
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    ours = subprocess.Popen(sleeper, start_new_session=True, env={"MEMORY_MCP_JOB_ID": "job-left-behind"})
    stranger = subprocess.Popen(sleeper, start_new_session=True, env={"MEMORY_MCP_JOB_ID": "job-someone-else"})
    yield ours, stranger
    for proc in (ours, stranger):
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


async def test_jobs_left_running_by_a_dead_server_are_abandoned_and_killed(
    job_settings: Settings, sleepers: tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]
) -> None:
    ours, stranger = sleepers
    _stale_job(job_settings, "job-left-behind", ours.pid)
    _stale_job(job_settings, "job-reused-pgid", stranger.pid)
    async with KanbanService.open(job_settings) as kanban:
        left = await kanban.get_job("job-left-behind")
        reused = await kanban.get_job("job-reused-pgid")
        assert kanban.health()["jobs_abandoned_at_start"] == 2
        fresh = await kanban.trigger_job(wait_s=20)  # the limit is free again
    assert left.status == "abandoned" and "killed" in (left.reason or "")
    assert reused.status == "abandoned" and "killed" not in (reused.reason or "")
    assert wait_gone(ours.pid) == []
    assert stranger.poll() is None  # a pgid that does not carry the job's id is never signalled
    assert fresh.status == "succeeded"


@pytest.mark.parametrize("root", [True, False])
async def test_as_root_a_job_is_refused_unless_allowed_and_nothing_starts(
    make_settings: SettingsFactory, script: Path, monkeypatch: pytest.MonkeyPatch, root: bool, kanban_db: Path | str
) -> None:
    monkeypatch.setattr(jobs, "running_as_root", lambda: root)
    async with KanbanService.open(make_settings(kanban_db=kanban_db, job_command=[str(script)])) as kanban:
        if root:
            with pytest.raises(JobRefusedAsRoot, match="MEMORY_MCP_JOBS_ALLOW_ROOT"):
                await kanban.trigger_job(args=["slow"], actor="bob")
            assert await kanban.list_jobs() == []
        else:
            assert (await kanban.trigger_job(wait_s=20)).status == "succeeded"
    assert bool(list(script.parent.glob("probe-*.json"))) is not root  # the script ran only when allowed
    [entry] = audit_entries(kanban.settings)
    assert entry["status"] == ("refused" if root else "succeeded")


async def test_every_trigger_is_audited_with_who_args_exit_code_and_duration(
    job_settings: Settings, script: Path
) -> None:
    async with KanbanService.open(job_settings) as kanban:
        ok = await kanban.trigger_job(args=["a b", "; rm -rf ~"], wait_s=20, actor="lead")
        failed = await kanban.trigger_job(args=["fail"], wait_s=20, actor="bob")
    lines = audit_entries(job_settings)
    assert [(e["job_id"], e["actor"], e["args"], e["status"], e["exit_code"]) for e in lines] == [
        (ok.id, "lead", ["a b", "; rm -rf ~"], "succeeded", 0),
        (failed.id, "bob", ["fail"], "failed", 3),
    ]
    assert all(e["duration_ms"] >= 0 and e["at_ms"] >= ok.started_ms for e in lines)


async def test_a_command_gone_since_start_up_is_a_failed_job_saying_why(job_settings: Settings, script: Path) -> None:
    async with KanbanService.open(job_settings) as kanban:
        os.unlink(script)  # checked at start-up, removed before the trigger
        job = await kanban.trigger_job(wait_s=20)
    assert (job.status, job.exit_code) == ("failed", 127)
    assert job.reason == f"could not start {script}: No such file or directory"


async def test_a_second_server_on_the_board_leaves_the_live_servers_jobs_running(job_settings: Settings) -> None:
    async with KanbanService.open(job_settings) as first:
        job = await first.trigger_job(args=["slow"])
        _stale_job(job_settings, "job-on-another-host", job.pid or 0, server="elsewhere.example:1:1")
        async with KanbanService.open(job_settings) as second:
            assert second.health()["jobs_abandoned_at_start"] == 0
            assert (await second.get_job(job.id)).status == "running"
            assert (await second.get_job("job-on-another-host")).status == "running"
    assert _job_after(job_settings, job.id).status == "failed"  # canceled when its own server stopped


def _job_after(settings: Settings, job_id: str) -> Job:
    db = migrated(settings)
    try:
        return JobRecords(db).get(job_id)
    finally:
        db.close()
