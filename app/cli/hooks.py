"""Claude Code hooks as subcommands: ``memory-mcp hook recall`` and ``memory-mcp hook remember``.

A hook must never get in the way of the person typing, so both commands share three rules: they
finish within a time budget (``MEMORY_MCP_HOOK_TIMEOUT_S``, default 1.8 s, enforced by a watchdog that
ends the process even if a read or a connection hangs), they exit 0 (1 only for a mistyped hook
command line, never 2, which Claude Code reads as "block"), and when anything goes wrong (server down,
slow, refusing) they print nothing on stdout and one line on stderr saying why.

The budget counts from the hook's first step, not from the interpreter's start: on a busy machine the
start is what varies. To keep that start short, this module and what it imports use only the standard
library (``app.cli`` routes ``hook`` here before importing any other command).

``hook recall`` (``UserPromptSubmit``): reads ``{"prompt": …}`` on stdin, skips prompts under 5
characters, asks the server's vector search for the prompt and prints a ``<memory_recall>`` block.
Recalled text was written by other agents, so the block (``app/memory/recall_block.py``, which the MCP
``recall`` prompt shares) is spotlighted: it says the notes are data,
not instructions, each note sits in its own ``<memory …>`` element with id, score, similarity and
scope, and ``&``, ``<`` and ``>`` in the text are escaped so no note can close the block or open a new
one. Notes come in the server's order, by ``score`` (0..1, similarity and keyword score combined);
``--min-score`` is a floor on that ``score``, and the first note also shows when it shares a rare term
with the prompt (:mod:`app.cli.hook_floor`); a text stored several times in a scope is one note whose
``duplicate_ids`` attribute names the other copies.

``hook remember`` (``Stop``): opt-in with ``MEMORY_MCP_HOOK_REMEMBER=1``. It stores the last
assistant message of the transcript (``transcript_path``) as a short summary tagged
``session-summary`` (scope ``agent:claude-code``, importance 0.3) when that message has at least
40 characters; longer messages are cut to 600 characters. Nothing is stored when
``stop_hook_active`` is true, the transcript is missing, or the message is trivial.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from app.cli.env import _is_loopback, integer, scope_for, server_url, token_from_env
from app.cli.hook_floor import DEFAULT_MIN_SCORE, shown
from app.memory.recall_block import format_recall

DEFAULT_BUDGET_S = 1.8
MIN_PROMPT_CHARS = 5
MAX_STDIN_BYTES = 1024 * 1024
MAX_QUERY_CHARS = 2000
MIN_SUMMARY_CHARS = 40
MAX_SUMMARY_CHARS = 600
TRANSCRIPT_TAIL_BYTES = 512 * 1024
SUMMARY_TAG = "session-summary"

_output_lock = threading.Lock()


class HookFailed(Exception):
    """Why the hook gave up, in one line for stderr."""


class Budget:
    """A deadline for the hook, with a watchdog that says so on stderr and exits 0 when it passes."""

    def __init__(self, seconds: float, hook: str) -> None:
        self.seconds = seconds
        self.hook = hook
        self.deadline = time.monotonic() + seconds
        # A blocked stdin read or a stuck socket cannot be interrupted portably; ending the process
        # is the only way to honour the budget. The lock keeps a half-written block from escaping.
        timer = threading.Timer(seconds, self._expire)
        timer.daemon = True
        timer.start()

    def _expire(self) -> None:
        _output_lock.acquire(timeout=0.2)
        give_up(self.hook, self.spent())
        os._exit(0)

    def spent(self) -> str:
        return f"no answer within {self.seconds:g} s (raise MEMORY_MCP_HOOK_TIMEOUT_S on a busy machine)"

    def remaining(self) -> float:
        return max(self.deadline - time.monotonic(), 0.0)


def give_up(hook: str, why: str) -> None:
    """The one stderr line of a hook that did nothing; stdout stays empty."""
    try:
        sys.stderr.write(f"memory-mcp hook {hook}: skipped: {why}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _budget_seconds() -> float:
    try:
        value = float(os.environ.get("MEMORY_MCP_HOOK_TIMEOUT_S", DEFAULT_BUDGET_S))
    except ValueError:
        return DEFAULT_BUDGET_S
    return min(max(value, 0.1), 10.0)


def _read_event() -> dict[str, Any] | None:
    """The hook's JSON object from stdin, or None (a terminal, bad JSON, not an object)."""
    if sys.stdin is None or sys.stdin.isatty():
        return None
    raw = sys.stdin.buffer.read(MAX_STDIN_BYTES)
    try:
        event = json.loads(raw.decode("utf-8", errors="replace"))
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


def call_server(method: str, path: str, budget: Budget, *, params: dict[str, Any] | None = None,
                body: Any = None) -> Any:
    """One REST call within what is left of the budget; the decoded JSON answer.

    Raises:
        HookFailed: a malformed ``MEMORY_MCP_URL``, an unreachable server, an error answer.
    """
    base = server_url()
    parts = urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HookFailed(f"MEMORY_MCP_URL must look like http://127.0.0.1:3002, got {base!r}")
    query = urlencode({key: value for key, value in (params or {}).items() if value is not None})
    headers = {"Accept": "application/json", "User-Agent": "memory-mcp-hook"}
    data = None if body is None else json.dumps(body).encode()
    if data is not None:
        headers["Content-Type"] = "application/json"
    token = token_from_env()
    if token:
        headers["Authorization"] = f"Bearer {token}"
    # A proxy from the environment must not capture calls to a server on this machine.
    opener = urllib.request.build_opener(*([urllib.request.ProxyHandler({})] if _is_loopback(parts.hostname) else []))
    request = urllib.request.Request(base + path + (f"?{query}" if query else ""), data=data, headers=headers,
                                     method=method)
    # Leave a little of the budget for printing; the watchdog is the backstop.
    try:
        with opener.open(request, timeout=max(budget.remaining() - 0.1, 0.05)) as response:
            payload = response.read()
    except urllib.error.HTTPError as exc:
        hint = " (set MEMORY_MCP_TOKEN to the server's token)" if exc.code == 401 else ""
        raise HookFailed(f"memory-mcp at {base} answered HTTP {exc.code}{hint}") from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, TimeoutError):
            raise HookFailed(budget.spent()) from exc
        raise HookFailed(f"cannot reach memory-mcp at {base}: {reason} (is `memory-mcp serve` running?)") from exc
    try:
        return json.loads(payload) if payload else None
    except ValueError as exc:
        raise HookFailed(f"unexpected non-JSON answer from {base}{path}") from exc


def _emit(text: str) -> None:
    with _output_lock:
        sys.stdout.write(text)
        sys.stdout.flush()


# --- recall -----------------------------------------------------------------------------------


def _recall_hits(event: dict[str, Any], args: argparse.Namespace, budget: Budget) -> list[dict[str, Any]]:
    prompt = event.get("prompt")
    if not isinstance(prompt, str) or len(prompt.strip()) < MIN_PROMPT_CHARS:
        return []
    params = {"q": prompt.strip()[:MAX_QUERY_CHARS], "limit": args.top_k, "scope": scope_for(args.agent, args.scope)}
    hits = call_server("GET", "/api/lancedb/vector-search", budget, params=params)
    if not isinstance(hits, list):
        return []
    return shown(prompt, [hit for hit in hits if isinstance(hit, dict)], args.min_score)


def _hook_recall(args: argparse.Namespace) -> int:
    budget = Budget(_budget_seconds(), "recall")
    try:
        event = _read_event()
        block = format_recall(_recall_hits(event, args, budget)) if event else ""
    except HookFailed as exc:
        give_up("recall", str(exc))
        return 0
    except Exception as exc:  # a hook never fails the prompt, whatever went wrong
        give_up("recall", f"{type(exc).__name__}: {exc}")
        return 0
    if block:
        _emit(block)
    return 0


# --- remember ---------------------------------------------------------------------------------


def _message_text(entry: dict[str, Any]) -> str:
    """Text of an assistant transcript entry (string content or its text blocks)."""
    message = entry.get("message") if isinstance(entry.get("message"), dict) else entry
    if entry.get("type") != "assistant" and message.get("role") != "assistant":
        return ""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"]
        return "\n".join(part for part in parts if isinstance(part, str))
    return ""


def last_assistant_text(transcript: Path) -> str:
    """The last assistant message with text in a Claude Code transcript (JSONL), read from its tail."""
    with transcript.open("rb") as handle:
        size = handle.seek(0, os.SEEK_END)
        handle.seek(max(size - TRANSCRIPT_TAIL_BYTES, 0))
        lines = handle.read().decode("utf-8", errors="replace").splitlines()
    for line in reversed(lines):
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # the first line of the tail may be cut in half
        text = _message_text(entry).strip() if isinstance(entry, dict) else ""
        if text:
            return text
    return ""


def summarise(text: str) -> str | None:
    """A bounded one-paragraph summary, or None when the message is too short to be worth keeping."""
    flat = " ".join(text.split())
    if len(flat) < MIN_SUMMARY_CHARS:
        return None
    if len(flat) > MAX_SUMMARY_CHARS:
        cut = flat[:MAX_SUMMARY_CHARS].rsplit(" ", 1)[0]
        flat = (cut if len(cut) > MAX_SUMMARY_CHARS // 2 else flat[:MAX_SUMMARY_CHARS]) + " …"
    return flat


def _enabled() -> bool:
    return os.environ.get("MEMORY_MCP_HOOK_REMEMBER", "").strip().lower() in ("1", "true", "yes", "on")


def _hook_remember(args: argparse.Namespace) -> int:
    if not _enabled():
        return 0
    budget = Budget(_budget_seconds(), "remember")
    try:
        event = _read_event()
        if not event or event.get("stop_hook_active") is True:
            return 0
        path = event.get("transcript_path")
        if not isinstance(path, str) or not Path(path).expanduser().is_file():
            return 0
        summary = summarise(last_assistant_text(Path(path).expanduser()))
        if summary is None:
            return 0
        body = {
            "text": summary,
            "scope": scope_for(args.agent, args.scope),
            "category": SUMMARY_TAG,
            "importance": 0.3,
        }
        call_server("POST", "/api/lancedb/memories", budget, body=body)
    except HookFailed as exc:
        give_up("remember", str(exc))
    except Exception as exc:  # a hook never fails the session, whatever went wrong
        give_up("remember", f"{type(exc).__name__}: {exc}")
    return 0


# --- parser -----------------------------------------------------------------------------------


def _score(text: str) -> float:
    value = float(text)
    if not -1.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError("a score is between -1 and 1")
    return value


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``hook recall`` and ``hook remember``."""
    hook = commands.add_parser(
        "hook",
        help="Claude Code hooks (UserPromptSubmit, Stop); always exit 0, never block",
        description="Claude Code hooks. They read the hook's JSON on stdin, finish within "
        "MEMORY_MCP_HOOK_TIMEOUT_S (default 1.8 s), print one line on stderr on any failure and always exit 0.",
    )
    hooks = hook.add_subparsers(dest="hook", required=True, metavar="HOOK")

    recall = hooks.add_parser(
        "recall", help="UserPromptSubmit: print a <memory_recall> block of memories relevant to the prompt"
    )
    recall.add_argument("--top-k", type=integer(1, 20), default=5, metavar="N", help="at most N notes (5)")
    recall.add_argument("--min-score", type=_score, default=DEFAULT_MIN_SCORE,
                        help=f"drop notes scoring below this unless the first shares a rare term ({DEFAULT_MIN_SCORE})")
    group = recall.add_mutually_exclusive_group()
    group.add_argument("--agent", help="search only this agent's scope (default: every scope)")
    group.add_argument("--scope", help="search only this scope")
    recall.set_defaults(handler=_hook_recall)

    remember = hooks.add_parser(
        "remember",
        help="Stop: store the last assistant message as a session summary (needs MEMORY_MCP_HOOK_REMEMBER=1)",
    )
    group = remember.add_mutually_exclusive_group()
    group.add_argument("--agent", default="claude-code", help="agent whose scope gets the summary (claude-code)")
    group.add_argument("--scope", help="store in this exact scope instead")
    remember.set_defaults(handler=_hook_remember)
