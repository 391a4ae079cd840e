"""Helpers for the memory REST routes on a live server."""

from __future__ import annotations

import httpx

API = "/api/lancedb"


def create_memory(client: httpx.Client, text: str, **fields: object) -> str:
    """POST one memory; returns its id (the answer must be 200 with ok)."""
    response = client.post("/memories", json={"text": text, **fields})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["ok"] is True
    return str(body["id"])
