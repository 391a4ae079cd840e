"""The OpenAPI schema tells the truth about errors: every status a route answers, each with ``{detail, code}``.

Routes declare their own statuses with ``errors(...)``. The edge guard answers 401/403/421/413 in front of
every route, so ``document_edge_errors`` adds those to each operation once the schema is built, along with
the bearer scheme, the links from a created resource to what its id unlocks, and the bounds that come from
settings (``MEMORY_MCP_MAX_TEXT_CHARS`` and the tag limits). FastAPI's own 422 body
(``HTTPValidationError``) is never produced here, so it is never declared.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, Field

from app.edge.auth import OPEN_PATHS
from app.rest.patterns import category_pattern
from app.settings import Settings


class ErrorBody(BaseModel):
    """Every error answer: what went wrong in words, and a stable snake_case code to match on."""

    detail: str = Field(description="What went wrong and, where it helps, what to do instead.")
    code: str = Field(description="Stable snake_case code, e.g. invalid_input, task_not_found, forbidden.")


DESCRIPTIONS: dict[int, str] = {
    400: "Malformed request: the body is not readable JSON (malformed_body).",
    401: "Missing or invalid bearer token (unauthorized); the response carries WWW-Authenticate: Bearer.",
    403: "Refused: a cross-origin request (forbidden_origin), a token without the permission this needs "
    "(forbidden), or a scope the agent may not write (scope_forbidden).",
    404: "No such resource (the code names it: memory_not_found, task_not_found, job_not_found).",
    409: "Conflict with the current state (task_exists, status_conflict, step_out_of_range).",
    413: "Request body larger than MEMORY_MCP_MAX_BODY_BYTES (payload_too_large).",
    421: "The Host header names a host this server does not answer for (misdirected_host).",
    422: "Invalid input; the code names the rule (invalid_input, invalid_scope, invalid_task_id, ...).",
    503: "Temporarily unavailable (store_busy, embedding_unavailable, job_not_configured); see Retry-After.",
}
_EDGE_STATUSES = (403, 421)
API_PREFIX = "/api/"
_BODY_METHODS = frozenset({"post", "put", "patch"})
#: Placeholders the schema carries until settings fill them in (see ``_settings_bounds``).
TEXT_LIMIT_MARK = "x-memory-text-limit"
CATEGORY_MARK = "x-memory-category"
#: Longest search query in a URL: 4,000 characters of 4-byte UTF-8, percent-encoded, are 48 KB, which
#: leaves room for the other parameters under the server's 64 KiB limit on a URL (measured: 65,519 bytes of query).
MAX_QUERY_CHARS = 4000


# What a created resource's id unlocks: (creating operation, its success statuses, path parameter, targets).
# Declared so that clients and stateful fuzzers follow the real relationships instead of guessing them.
_LINKS: list[tuple[tuple[str, str], tuple[str, ...], str, list[tuple[str, str]]]] = [
    (("/api/kanban/tasks", "post"), ("201",), "task_id", [
        ("/api/kanban/tasks/{task_id}", "get"), ("/api/kanban/tasks/{task_id}", "patch"),
        ("/api/kanban/tasks/{task_id}/move", "post"), ("/api/kanban/tasks/{task_id}/notes", "post"),
        ("/api/kanban/tasks/{task_id}", "delete"),
    ]),
    (("/api/lancedb/memories", "post"), ("200",), "memory_id", [
        ("/api/lancedb/memories/{memory_id}", "get"), ("/api/lancedb/memories/{memory_id}", "patch"),
        ("/api/lancedb/memories/{memory_id}", "delete"),
    ]),
    (("/api/kanban/jobs", "post"), ("200", "202"), "job_id", [("/api/kanban/jobs/{job_id}", "get")]),
]


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for a route: each status with the ``ErrorBody`` schema and what it means."""
    return {status: {"model": ErrorBody, "description": DESCRIPTIONS[status]} for status in statuses}


def _error_response(status: int) -> dict[str, Any]:
    content = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    return {"description": DESCRIPTIONS[status], "content": content}


def _settings_bounds(node: Any, settings: Settings) -> None:
    """Replace the placeholders with the configured limits, wherever they sit in the schema."""
    if isinstance(node, dict):
        if node.pop(TEXT_LIMIT_MARK, None) is not None:
            node["maxLength"] = min(settings.max_text_chars, node.get("maxLength", settings.max_text_chars))
        if node.pop(CATEGORY_MARK, None) is not None:
            node["pattern"] = category_pattern(settings.max_tags, settings.max_tag_chars)
        for value in node.values():
            _settings_bounds(value, settings)
    elif isinstance(node, list):
        for value in node:
            _settings_bounds(value, settings)


def _add_edge_errors(schema: dict[str, Any], auth_enabled: bool) -> None:
    for path, operations in schema.get("paths", {}).items():
        needs_token = auth_enabled and path not in OPEN_PATHS
        for method, operation in operations.items():
            responses: dict[str, Any] = operation.setdefault("responses", {})
            statuses = [*_EDGE_STATUSES, *([401] if needs_token else [])]
            if method in _BODY_METHODS and "requestBody" in operation:
                statuses += [400, 413]
            if path.startswith(API_PREFIX):
                statuses.append(503)  # the services are not open yet, or no longer (starting)
            for status in statuses:
                responses.setdefault(str(status), _error_response(status))
            if "422" in responses:
                # FastAPI declares its own 422 body wherever a route has parameters; ours is ErrorBody.
                responses["422"] = _error_response(422)
            if auth_enabled and not needs_token:
                operation["security"] = []


def _add_links(schema: dict[str, Any]) -> None:
    paths: dict[str, Any] = schema.get("paths", {})
    for (path, method), statuses, parameter, targets in _LINKS:
        source = paths.get(path, {}).get(method)
        if source is None:
            continue
        links = {
            paths[target][verb]["operationId"]: {
                "operationId": paths[target][verb]["operationId"],
                "parameters": {parameter: "$response.body#/id"},
            }
            for target, verb in targets
            if verb in paths.get(target, {})
        }
        for status in statuses:
            if status in source["responses"]:
                source["responses"][status]["links"] = links


def document_edge_errors(app: FastAPI) -> None:
    """Make ``app.openapi()`` add the edge guard's answers, the bearer scheme and the configured bounds."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        settings: Settings = app.state.settings
        schema = build()
        auth_enabled = settings.token is not None or bool(settings.agent_tokens)
        _add_edge_errors(schema, auth_enabled)
        _add_links(schema)
        _settings_bounds(schema, settings)
        components = schema.setdefault("components", {})
        schemas = components.setdefault("schemas", {})
        schemas.setdefault("ErrorBody", ErrorBody.model_json_schema())
        for unused in ("HTTPValidationError", "ValidationError"):
            schemas.pop(unused, None)
        if auth_enabled:
            components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
            schema["security"] = [{"bearer": []}]
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
