"""``memory-mcp service systemd|launchd``: print a unit that starts the server at login.

The unit runs this very interpreter (``python -m app.cli serve``), so it keeps working whichever
way the package was installed, in the directory the command was run from (where a ``.env`` is read).
It is printed, never installed: where to put it and how to enable it goes to stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from xml.sax.saxutils import escape

from app.cli.env import EXIT_OK

LABEL = "memory-mcp"
LAUNCHD_LABEL = "io.github.memory-mcp"


def _command() -> list[str]:
    return [sys.executable, "-m", "app.cli", "serve"]


def _systemd_quote(word: str) -> str:
    """One ExecStart word: quoted when it has spaces or quotes; ``%`` doubled (systemd expands it)."""
    word = word.replace("%", "%%")
    if any(c in word for c in " \t\"'\\"):
        return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return word


def systemd_unit(workdir: Path) -> str:
    """A systemd user unit: restarts after a crash, stops on SIGTERM (the server then exits 0)."""
    return f"""[Unit]
Description=memory-mcp: shared memory and kanban board for AI agents
After=network.target

[Service]
Type=simple
WorkingDirectory={_systemd_quote(str(workdir))}
ExecStart={" ".join(_systemd_quote(word) for word in _command())}
Restart=on-failure
RestartSec=2
KillSignal=SIGTERM
TimeoutStopSec=20

[Install]
WantedBy=default.target
"""


def launchd_plist(workdir: Path, log_path: Path) -> str:
    """A launchd agent: starts at login, restarted when it did not exit cleanly; logs to ``log_path``."""
    arguments = "\n".join(f"    <string>{escape(word)}</string>" for word in _command())
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
  <key>Label</key>
  <string>{LAUNCHD_LABEL}</string>
  <key>ProgramArguments</key>
  <array>
{arguments}
  </array>
  <key>WorkingDirectory</key>
  <string>{escape(str(workdir))}</string>
  <key>RunAtLoad</key>
  <true/>
  <key>KeepAlive</key>
  <dict>
    <key>SuccessfulExit</key>
    <false/>
  </dict>
  <key>StandardOutPath</key>
  <string>{escape(str(log_path))}</string>
  <key>StandardErrorPath</key>
  <string>{escape(str(log_path))}</string>
</dict>
</plist>
"""


def _print(args: argparse.Namespace) -> int:
    workdir = Path(os.getcwd())
    home = Path.home()
    if args.kind == "systemd":
        sys.stdout.write(systemd_unit(workdir))
        target = home / ".config/systemd/user" / f"{LABEL}.service"
        hint = (f"save it as {target}, then: systemctl --user daemon-reload && systemctl --user enable --now {LABEL}"
                f"  (logs: journalctl --user -u {LABEL})")
    else:
        log_path = home / "Library/Logs" / f"{LABEL}.log"
        sys.stdout.write(launchd_plist(workdir, log_path))
        target = home / "Library/LaunchAgents" / f"{LAUNCHD_LABEL}.plist"
        hint = f"save it as {target}, then: launchctl load -w {target}  (logs: {log_path})"
    print(hint, file=sys.stderr)
    return EXIT_OK


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    service = commands.add_parser(
        "service", help="print a systemd user unit or a launchd agent that starts the server at login",
        description="Print a unit that runs `memory-mcp serve` at login from the current directory "
        "(its .env is read). Redirect stdout to the file named on stderr.",
    )
    service.add_argument("kind", choices=("systemd", "launchd"))
    service.set_defaults(handler=_print)
