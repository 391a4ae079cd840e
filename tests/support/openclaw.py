"""An ``openclaw.json`` that points memory-lancedb-pro at a table and an embedding endpoint, as OpenClaw writes it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_plugin_config(path: Path, db_path: Path, embedding: dict[str, Any], *, enabled: bool | None = True) -> Path:
    """Write ``path`` with the plugin's entry (``enabled`` None: the key left out, as a hand-written file may)."""
    entry: dict[str, Any] = {"config": {"dbPath": str(db_path), "embedding": embedding}}
    if enabled is not None:
        entry = {"enabled": enabled, **entry}
    path.write_text(json.dumps({"plugins": {"entries": {"memory-lancedb-pro": entry}}}), encoding="utf-8")
    return path
