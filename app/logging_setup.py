"""Logs: one JSON object (or key=value line) per record, with the request id; readable lines on a terminal.

``MEMORY_MCP_LOG_FORMAT``: ``auto`` (the default) writes ``console`` lines when stderr is a terminal and
JSON otherwise (a service manager, a file, a container); ``json``, ``text`` (key=value) and ``console``
force one.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
import time

from app.settings import Settings

request_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)


class _RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id_var.get()
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        request_id = getattr(record, "request_id", None)
        if request_id:
            payload["request_id"] = request_id
        if record.exc_info:
            payload["exc"] = self.formatException(record.exc_info)
        return json.dumps(payload, ensure_ascii=False)


class KeyValueFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        request_id = getattr(record, "request_id", None)
        line = f"level={record.levelname.lower()} logger={record.name} msg={json.dumps(record.getMessage())}"
        if request_id:
            line += f" request_id={request_id}"
        if record.exc_info:
            line += " exc=" + json.dumps(self.formatException(record.exc_info))
        return line


class ConsoleFormatter(logging.Formatter):
    """For a person at a terminal: local time, level, where, message."""

    def format(self, record: logging.LogRecord) -> str:
        line = (f"{time.strftime('%H:%M:%S', time.localtime(record.created))} {record.levelname:<7} "
                f"{record.name}: {record.getMessage()}")
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


_HANDLER_NAME = "memory-mcp"


def formatter_for(log_format: str, terminal: bool) -> logging.Formatter:
    if log_format == "auto":
        log_format = "console" if terminal else "json"
    if log_format == "json":
        return JsonFormatter()
    return ConsoleFormatter() if log_format == "console" else KeyValueFormatter()


def configure_logging(settings: Settings) -> None:
    """One handler for the ``app`` and ``uvicorn`` logger trees, so every line has one format; idempotent."""
    handler = logging.StreamHandler()
    handler.set_name(_HANDLER_NAME)
    terminal = bool(getattr(sys.stderr, "isatty", None) and sys.stderr.isatty())
    handler.setFormatter(formatter_for(settings.log_format, terminal))
    handler.addFilter(_RequestIdFilter())
    for name in ("app", "uvicorn"):
        tree = logging.getLogger(name)
        tree.setLevel(settings.log_level.upper())
        for old in list(tree.handlers):
            if old.get_name() == _HANDLER_NAME:
                tree.removeHandler(old)
        tree.addHandler(handler)
    # uvicorn's own records stop here instead of reaching a root handler a library may have installed.
    logging.getLogger("uvicorn").propagate = False
    # psycopg's pool warns at each failed reconnect; app.kanban.postgres says once that the board is down
    # and once that it is back.
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
