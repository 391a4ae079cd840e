"""Input checks shared by the store, the service and the Obsidian import."""

from __future__ import annotations

from app.errors import Conflict, InvalidInput
from app.kanban.errors import InvalidStatus, InvalidTaskId
from app.kanban.models import MAX_STEPS, STATUSES

MAX_TITLE_CHARS = 300
MAX_DESCRIPTION_CHARS = 100_000
MAX_NAME_CHARS = 100
MAX_NOTE_CHARS = 20_000
MAX_TAGS = 32
MAX_TAG_CHARS = 64


def normalize_task_id(raw: str) -> str:
    """``TASK-00001`` or the long form ``TASK-00001-some-title`` -> ``TASK-00001``.

    Raises:
        InvalidTaskId: anything else (path syntax such as ``../x`` never gets through).
    """
    text = raw.strip() if isinstance(raw, str) else ""
    if text[:5].upper() == "TASK-":
        end = 5
        while end < len(text) and text[end].isascii() and text[end].isdigit():
            end += 1
        digits = text[5:end]
        if 5 <= len(digits) <= 9 and (end == len(text) or text[end] == "-"):
            return format_task_id(int(digits))
    raise InvalidTaskId(f"invalid task id {raw!r}: expected TASK-00001 or TASK-00001-<title>")


def format_task_id(number: int) -> str:
    return f"TASK-{number:05d}"


def task_number(task_id: str) -> int:
    return int(normalize_task_id(task_id)[5:])


def check_status(status: str) -> str:
    """Raises: InvalidStatus listing the valid statuses."""
    value = status.strip().lower() if isinstance(status, str) else ""
    if value not in STATUSES:
        raise InvalidStatus(f"unknown status {status!r}; valid statuses: {', '.join(STATUSES)}")
    return value


def check_title(title: str) -> str:
    """One line, no wiki-link brackets: the title ends up inside ``[[...]]`` on the Obsidian board."""
    text = title.strip() if isinstance(title, str) else ""
    if not text:
        raise InvalidInput("title must not be empty", code="invalid_title")
    if len(text) > MAX_TITLE_CHARS:
        raise InvalidInput(f"title is longer than {MAX_TITLE_CHARS} characters", code="invalid_title")
    if any(bad in text for bad in ("\n", "\r", "[[", "]]", "\x00")):
        raise InvalidInput("title must be one line without '[[' or ']]'", code="invalid_title")
    return text


def check_name(value: str, what: str, *, allow_empty: bool = False) -> str:
    text = value.strip() if isinstance(value, str) else ""
    if not text and not allow_empty:
        raise InvalidInput(f"{what} must not be empty")
    if len(text) > MAX_NAME_CHARS or any(c in text for c in "\n\r\x00"):
        raise InvalidInput(f"{what} must be one line of at most {MAX_NAME_CHARS} characters")
    return text


def check_description(text: str | None) -> str:
    value = text or ""
    if len(value) > MAX_DESCRIPTION_CHARS or "\x00" in value:
        raise InvalidInput(f"description must be at most {MAX_DESCRIPTION_CHARS} characters without NUL")
    return value


def check_steps(steps: list[str] | None) -> list[str]:
    values = [check_name(step, "step assignee") for step in steps or []]
    if len(values) > MAX_STEPS:
        raise InvalidInput(f"at most {MAX_STEPS} steps (assignees) are allowed, got {len(values)}")
    return values


class StepOutOfRange(Conflict, InvalidInput):
    """A current_step the task's steps do not have: REST answers 409, since which steps exist is task state."""

    code = "step_out_of_range"


def check_current_step(current_step: int | None, steps: list[str]) -> int | None:
    """Raises: StepOutOfRange: there is no such step."""
    if current_step is None:
        return 1 if steps else None
    if not steps or not 1 <= current_step <= len(steps):
        raise StepOutOfRange(f"current_step must be between 1 and the number of steps ({len(steps)})")
    return current_step


def check_tags(tags: list[str] | None) -> list[str]:
    values = [tag.strip() for tag in tags or [] if isinstance(tag, str) and tag.strip()]
    if len(values) > MAX_TAGS or any(len(tag) > MAX_TAG_CHARS or "\n" in tag for tag in values):
        raise InvalidInput(f"at most {MAX_TAGS} one-line tags of at most {MAX_TAG_CHARS} characters")
    return values


def check_note(text: str) -> str:
    value = text.strip() if isinstance(text, str) else ""
    if not value:
        raise InvalidInput("note text must not be empty")
    if len(value) > MAX_NOTE_CHARS or "\x00" in value:
        raise InvalidInput(f"note text must be at most {MAX_NOTE_CHARS} characters without NUL")
    return value


def check_priority(priority: str | None) -> str | None:
    if priority is None:
        return None
    return check_name(priority, "priority", allow_empty=True) or None
