"""The built wheel is what users install: it declares Python 3.11+, resolves on 3.12 and 3.13 from wheels
only, and once installed in a fresh virtualenv gives a working ``memory-mcp`` command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from tests.support.server import free_port, wait_until_ready

pytestmark = [pytest.mark.slow, pytest.mark.long]  # `make check-long`
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(REPO)],
                   check=True, capture_output=True)
    [built] = out.glob("memory_mcp-*.whl")
    return built


def _metadata(wheel: Path) -> dict[str, list[str]]:
    fields: dict[str, list[str]] = {}
    with zipfile.ZipFile(wheel) as archive:
        [name] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        head = archive.read(name).decode().split("\n\n", 1)[0]  # the body after the blank line is the README
    for line in head.splitlines():
        key, _, value = line.partition(": ")
        fields.setdefault(key, []).append(value)
    return fields


def test_the_wheel_declares_python_3_11_and_later(wheel: Path) -> None:
    # pip ignores Requires-Python for a wheel named on its command line, so read the field itself.
    assert _metadata(wheel)["Requires-Python"] == [">=3.11"]


def test_the_wheel_ships_the_tool_list_the_stdio_bridge_lists_while_the_server_is_down(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        shipped = json.loads(archive.read("app/cli/tool_list.json"))
    assert shipped == json.loads((REPO / "app" / "cli" / "tool_list.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("python", ["3.12", "3.13"])
def test_the_wheel_s_dependencies_resolve_from_wheels_alone_on(python: str, wheel: Path, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed", "--target",
         str(tmp_path / "target"), "--python-version", python, "--only-binary=:all:", "--report", str(report),
         str(wheel)],
        check=True, capture_output=True,
    )
    chosen = {item["metadata"]["name"].lower(): item for item in json.loads(report.read_text())["install"]}
    declared = [d.split(";")[0].split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip().lower()
                for d in _metadata(wheel)["Requires-Dist"] if "extra ==" not in d]
    assert "memory-mcp" in chosen and declared
    assert all(name.replace("_", "-") in {c.replace("_", "-") for c in chosen} for name in declared)
    assert all(item["download_info"]["url"].endswith(".whl") for item in chosen.values())


def test_an_installed_wheel_reports_its_version_and_serves(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    subprocess.run([str(env_dir / "bin" / "pip"), "install", "--quiet", str(wheel)], check=True, capture_output=True)
    command = str(env_dir / "bin" / "memory-mcp")
    shown = subprocess.run([command, "--version"], check=True, capture_output=True, text=True).stdout
    assert shown.strip() == f"memory-mcp {_metadata(wheel)['Version'][0]}"

    port = free_port()
    env = {**os.environ, "MEMORY_MCP_PORT": str(port), "MEMORY_MCP_DB_PATH": str(tmp_path / "db"),
           "MEMORY_MCP_KANBAN_DB": str(tmp_path / "kanban.sqlite3"), "MEMORY_MCP_EMBEDDING_PROVIDER": "hash",
           "MEMORY_MCP_MODEL_CACHE_DIR": str(tmp_path / "models")}
    log = (tmp_path / "serve.log").open("wb")
    # Started from tmp_path, so nothing is imported from the source tree.
    process = subprocess.Popen([command, "serve"], env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until_ready(f"http://127.0.0.1:{port}", process, timeout=120)
    finally:
        process.terminate()
        process.wait(30)
        log.close()
    assert process.returncode == 0
