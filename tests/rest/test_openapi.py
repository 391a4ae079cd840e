"""The OpenAPI schema documents what the server does: error bodies, statuses, id patterns, bounds, links."""

from __future__ import annotations

from typing import Any

import pytest

from app.main import create_app
from app.memory.validation import MAX_OFFSET
from app.rest import patterns
from app.rest.schema import MAX_QUERY_CHARS
from tests.conftest import SettingsFactory

ERROR_REF = "#/components/schemas/ErrorBody"
EVERY_API_ROUTE = {401, 403, 421, 503}
WITH_A_BODY = EVERY_API_ROUTE | {400, 413, 422}
STATUSES = {
    ("get", "/api/lancedb/vector-search"): EVERY_API_ROUTE | {422},
    ("get", "/api/lancedb/memories"): EVERY_API_ROUTE | {422},
    ("post", "/api/lancedb/memories"): WITH_A_BODY | {404, 409},
    ("get", "/api/lancedb/memories/{memory_id}"): EVERY_API_ROUTE | {404, 422},
    ("patch", "/api/lancedb/memories/{memory_id}"): WITH_A_BODY | {404},
    ("delete", "/api/lancedb/memories/{memory_id}"): EVERY_API_ROUTE | {404, 422},
    ("get", "/api/kanban/board"): EVERY_API_ROUTE,
    ("post", "/api/kanban/tasks"): WITH_A_BODY | {409},
    ("get", "/api/kanban/tasks/{task_id}"): EVERY_API_ROUTE | {404, 422},
    ("patch", "/api/kanban/tasks/{task_id}"): WITH_A_BODY | {404, 409},
    ("delete", "/api/kanban/tasks/{task_id}"): EVERY_API_ROUTE | {404, 422},
    ("post", "/api/kanban/tasks/{task_id}/move"): WITH_A_BODY | {404, 409},
    ("post", "/api/kanban/tasks/{task_id}/notes"): WITH_A_BODY | {404},
    ("post", "/api/kanban/jobs"): WITH_A_BODY | {404},
    ("get", "/api/kanban/jobs/{job_id}"): EVERY_API_ROUTE | {404},
    ("get", "/healthz"): {403, 421},
}


@pytest.fixture
def schema(make_settings: SettingsFactory) -> dict[str, Any]:
    settings = make_settings(token="schema-token-123", max_text_chars=500, max_tags=4, max_tag_chars=9)
    return create_app(settings).openapi()


def operations(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(method, path, op) for path, ops in schema["paths"].items() for method, op in ops.items()]


def test_every_error_answer_is_documented_with_the_detail_and_code_body(schema: dict[str, Any]) -> None:
    errors = [(m, p, status, response) for m, p, op in operations(schema)
              for status, response in op["responses"].items() if int(status) >= 400]
    assert len(errors) > 100
    for method, path, status, response in errors:
        assert response["content"]["application/json"]["schema"] == {"$ref": ERROR_REF}, (method, path, status)
    assert schema["components"]["schemas"]["ErrorBody"]["required"] == ["detail", "code"]
    assert not {"HTTPValidationError", "ValidationError"} & set(schema["components"]["schemas"])


@pytest.mark.parametrize(("method", "path"), STATUSES)
def test_each_route_documents_the_statuses_it_answers(schema: dict[str, Any], method: str, path: str) -> None:
    documented = {int(status) for status in schema["paths"][path][method]["responses"]}
    assert STATUSES[(method, path)] <= documented


def test_ids_carry_the_patterns_the_server_accepts(schema: dict[str, Any]) -> None:
    paths = schema["paths"]
    memory_id = paths["/api/lancedb/memories/{memory_id}"]["get"]["parameters"][0]["schema"]
    task_id = paths["/api/kanban/tasks/{task_id}"]["get"]["parameters"][0]["schema"]
    assert memory_id["pattern"] == patterns.MEMORY_ID_PATTERN == r"^[A-Za-z0-9_.:\-]{1,64}$"
    assert task_id["pattern"] == patterns.TASK_ID_PATH_PATTERN
    bodies = schema["components"]["schemas"]
    assert bodies["CreateTaskBody"]["properties"]["task_id"]["anyOf"][0]["pattern"] == patterns.NEW_TASK_ID_PATTERN
    assert bodies["JobBody"]["properties"]["task_id"]["anyOf"][0]["pattern"] == patterns.TASK_ID_PATTERN


def test_every_number_a_client_sends_is_bounded(schema: dict[str, Any]) -> None:
    found = 0
    for node in _walk(schema["paths"]) + _walk(schema["components"]["schemas"]):
        if node.get("type") in ("integer", "number") and "maximum" not in node:
            properties = schema["components"]["schemas"]
            assert node in _response_only(properties), node
        elif node.get("type") in ("integer", "number"):
            found += 1
            assert "minimum" in node and node["maximum"] < 2**63, node
    assert found >= 8
    offset = [p for p in schema["paths"]["/api/lancedb/memories"]["get"]["parameters"] if p["name"] == "offset"]
    assert offset[0]["schema"]["maximum"] == MAX_OFFSET


def test_limits_from_settings_are_in_the_schema(schema: dict[str, Any]) -> None:
    body = schema["components"]["schemas"]["MemoryCreate"]["properties"]
    assert body["text"]["maxLength"] == 500
    assert body["category"]["anyOf"][0]["pattern"] == patterns.category_pattern(4, 9)
    search = schema["paths"]["/api/lancedb/search"]["get"]["parameters"]
    assert [p["schema"]["maxLength"] for p in search if p["name"] == "q"] == [min(500, MAX_QUERY_CHARS)]
    assert "x-memory-text-limit" not in str(schema) and "x-memory-category" not in str(schema)


def test_a_created_resource_links_to_what_its_id_unlocks(schema: dict[str, Any]) -> None:
    created = schema["paths"]["/api/kanban/tasks"]["post"]["responses"]["201"]["links"]
    assert len(created) == 5 and {link["parameters"]["task_id"] for link in created.values()} == {"$response.body#/id"}
    for status in ("200", "202"):
        assert schema["paths"]["/api/kanban/jobs"]["post"]["responses"][status]["links"]
    assert len(schema["paths"]["/api/lancedb/memories"]["post"]["responses"]["200"]["links"]) == 3


def test_the_bearer_scheme_is_declared_only_when_a_token_is_required(make_settings: SettingsFactory,
                                                                     schema: dict[str, Any]) -> None:
    assert schema["security"] == [{"bearer": []}] and schema["paths"]["/healthz"]["get"]["security"] == []
    open_schema = create_app(make_settings()).openapi()
    assert "security" not in open_schema and "securitySchemes" not in open_schema["components"]
    assert "401" not in open_schema["paths"]["/api/kanban/board"]["get"]["responses"]


def _walk(node: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if isinstance(node, dict):
        found.append(node)
        for value in node.values():
            found += _walk(value)
    elif isinstance(node, list):
        for value in node:
            found += _walk(value)
    return found


def _response_only(schemas: dict[str, Any]) -> list[dict[str, Any]]:
    """Nodes of the models the server only sends (tasks, jobs, memories, hits, stats): not input."""
    inputs = {"CreateTaskBody", "PatchTaskBody", "MoveBody", "NoteBody", "JobBody", "MemoryCreate", "MemoryPatch"}
    return _walk([schema for name, schema in schemas.items() if name not in inputs])
