"""How setting values are read from their environment spelling: lists, JSON objects, locations, secrets.

Each parser raises ``ValueError`` with a message that names the rule and never quotes a secret;
``describe_errors`` turns pydantic's errors into one line per variable for ``memory-mcp serve``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from pydantic import ValidationError

# The object stores LanceDB opens by URI (s3+ddb: S3 with a DynamoDB commit table).
OBJECT_STORE_SCHEMES = ("s3", "s3+ddb", "gs", "az")
# A board URL with one of these schemes puts the board in PostgreSQL (app/kanban/postgres.py).
POSTGRES_SCHEMES = ("postgresql", "postgres")
URI = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$")


def _refuse_duplicate_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        # json.loads would keep the last one silently; the key may be a token, so it is never quoted.
        raise ValueError("a key is given twice")
    return dict(pairs)


def json_object(value: object) -> object:
    """A JSON object setting given as a string (blank: empty); anything else is left to validation.

    Raises:
        ValueError: not JSON, not an object, or a key given twice (the message never quotes the text).
    """
    if not isinstance(value, str):
        return value
    if not value.strip():
        return {}
    try:
        parsed = json.loads(value, object_pairs_hook=_refuse_duplicate_keys)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    if not isinstance(parsed, dict):
        raise ValueError("must be a JSON object")
    return parsed


def describe_errors(exc: ValidationError) -> list[str]:
    """One line per rejected setting, naming its variable and the problem, never the value."""
    lines = []
    for error in exc.errors():
        field = str(error["loc"][0]) if error["loc"] else ""
        variable = "JINA_API_KEY" if field == "jina_api_key" else f"MEMORY_MCP_{field.upper()}" if field else ""
        message = str(error["msg"]).removeprefix("Value error, ")
        named = not variable or message.startswith(("MEMORY_MCP_", "JINA_API_KEY", "refusing"))
        lines.append(message if named else f"{variable}: {message}")
    return lines


def split_list(value: object) -> object:
    """Accept a JSON list of strings or a comma-separated string for list settings.

    Raises:
        ValueError: a JSON object, or JSON that is not a list of strings.
    """
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return []
        if text.startswith(("[", "{")):
            try:
                value = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
        else:
            return [part.strip() for part in text.split(",") if part.strip()]
    if not isinstance(value, list) or not all(isinstance(item, str) and item.strip() for item in value):
        raise ValueError("must be a comma-separated list or a JSON list of non-empty strings")
    return [item.strip() for item in value]


def no_whitespace(secret: str, variable: str) -> None:
    """A credential with a space or a line break cannot travel in an HTTP header as it was meant."""
    if any(char.isspace() or ord(char) < 32 for char in secret):
        raise ValueError(f"{variable} must not contain spaces, line breaks or control characters")


def db_location(value: object) -> object:
    """A plain path (``~`` expanded) stays a ``Path``; an object-store URI stays a ``str``."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    match = URI.match(text)
    if match is None:
        return Path(text).expanduser()
    scheme, rest = match.group(1).lower(), match.group(2)
    if scheme == "file":
        return Path(rest).expanduser()
    if scheme not in OBJECT_STORE_SCHEMES or not rest.strip("/"):
        schemes = ", ".join(f"{name}://" for name in OBJECT_STORE_SCHEMES)
        raise ValueError(f"MEMORY_MCP_DB_PATH must be a directory or a bucket/prefix URI ({schemes}), got {value!r}")
    return f"{scheme}://{rest.rstrip('/')}"


def kanban_location(value: object) -> object:
    """A SQLite file path (``~`` expanded) stays a ``Path``; a ``postgresql://`` URL stays a ``str``."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    match = URI.match(text)
    if match is None:
        return Path(text).expanduser()
    scheme = match.group(1).lower()
    if scheme not in POSTGRES_SCHEMES:
        raise ValueError("MEMORY_MCP_KANBAN_DB must be a SQLite file path or a postgresql:// URL")
    return f"{scheme}://{match.group(2)}"  # libpq takes the scheme in lower case only
