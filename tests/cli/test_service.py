"""``memory-mcp service``: units that start the server at login run this interpreter's ``serve``."""

from __future__ import annotations

import configparser
import plistlib
import sys
from pathlib import Path

import pytest

from app.cli import main


def test_the_systemd_unit_runs_serve_from_here_and_restarts_on_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["service", "systemd"]) == 0
    out, err = capsys.readouterr()
    unit = configparser.ConfigParser(interpolation=None)
    unit.read_string(out)
    assert unit["Service"]["ExecStart"].split() == [sys.executable, "-m", "app.cli", "serve"]
    assert unit["Service"]["WorkingDirectory"] == str(tmp_path)
    assert unit["Service"]["Restart"] == "on-failure" and unit["Install"]["WantedBy"] == "default.target"
    assert "systemctl --user enable --now memory-mcp" in err


def test_the_launchd_plist_is_valid_and_starts_at_login(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["service", "launchd"]) == 0
    out, err = capsys.readouterr()
    plist = plistlib.loads(out.encode())
    assert plist["ProgramArguments"] == [sys.executable, "-m", "app.cli", "serve"]
    assert plist["WorkingDirectory"] == str(tmp_path) and plist["RunAtLoad"] is True
    assert plist["StandardErrorPath"].endswith("memory-mcp.log") and "launchctl load -w" in err
