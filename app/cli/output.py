"""Terminal output for the CLI: JSON for scripts, plain tables for people.

Memory text comes from other agents, so anything printed for a person is stripped of control and
bidi-override characters first: a stored memory must not be able to move the cursor, clear the
screen or reorder a line in someone's terminal.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from datetime import datetime
from typing import Any

_LOADED = time.monotonic()


def command_seconds() -> float:
    """Seconds since this process started: the duration a command reports is the one its caller waited.

    Imports alone took 27 s of a 30 s backup on a loaded machine, and a clock started inside the command
    printed 2.8 s. On Linux the process's start time comes from /proc; elsewhere, from this module's import.
    """
    try:
        with open("/proc/self/stat", encoding="ascii") as stat, open("/proc/uptime", encoding="ascii") as uptime:
            started_ticks = int(stat.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime
            return max(0.0, float(uptime.read().split()[0]) - started_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return time.monotonic() - _LOADED


_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]+")


def print_json(value: Any) -> None:
    """Exactly one JSON document on stdout (control characters come out escaped)."""
    sys.stdout.write(json.dumps(value, ensure_ascii=False, indent=2) + "\n")


def one_line(value: object) -> str:
    """A value as a single printable line."""
    if value is None:
        return ""
    return " ".join(_UNPRINTABLE.sub(" ", str(value)).split())


def local_time(timestamp_ms: object) -> str:
    """Milliseconds since the epoch as local ``YYYY-MM-DD HH:MM``; blank when unusable."""
    if not isinstance(timestamp_ms, int | float | str) or isinstance(timestamp_ms, bool):
        return ""
    try:
        return datetime.fromtimestamp(float(timestamp_ms) / 1000).astimezone().strftime("%Y-%m-%d %H:%M")
    except (TypeError, ValueError, OverflowError, OSError):
        return ""


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def render_table(headers: list[str], rows: list[list[str]], *, indent: int = 0) -> str:
    """Left-aligned columns; the last column takes what is left of the terminal width and is clipped."""
    width = max(shutil.get_terminal_size((120, 24)).columns, 60) - indent
    sizes = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers))]
    fixed = sum(sizes[:-1]) + 2 * (len(headers) - 1)
    sizes[-1] = max(min(sizes[-1], width - fixed), 10)
    pad = " " * indent
    lines = []
    for row in [headers, *rows]:
        cells = [_clip(cell, size).ljust(size) for cell, size in zip(row, sizes, strict=True)]
        lines.append(pad + "  ".join(cells).rstrip())
    return "\n".join(lines)
