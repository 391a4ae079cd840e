"""``memory-mcp doctor`` says where the embedding settings came from: OpenClaw's config or ours, never the key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.memory.embeddings.fake_server import fake_embedding_server
from tests.support.server import free_port

REPO = Path(__file__).resolve().parents[2]
KEY = "sk-doctor-SENTINEL-0123456789"


def _doctor(tmp_path: Path, **env_values: str) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_MCP_") and k != "JINA_API_KEY"}
    env.update(MEMORY_MCP_DB_PATH=str(tmp_path / "lancedb"), MEMORY_MCP_KANBAN_DB=str(tmp_path / "kanban.sqlite3"),
               MEMORY_MCP_PORT=str(free_port()), MEMORY_MCP_OPENCLAW_CONFIG=str(tmp_path / "openclaw.json"),
               PYTHONPATH=str(REPO), **env_values)
    done = subprocess.run([sys.executable, "-m", "app.cli", "doctor", "--json"], env=env, cwd=tmp_path,
                          capture_output=True, timeout=60, text=True, check=False)
    assert KEY not in done.stdout and KEY not in done.stderr
    report: dict[str, object] = json.loads(done.stdout)
    return report


def test_doctor_names_openclaws_config_as_the_source_of_the_embedding_settings(tmp_path: Path) -> None:
    with fake_embedding_server(dimension=8) as fake:
        embedding = {"apiKey": {"source": "env", "id": "OC_EMBED_KEY"}, "model": "bge-m3", "baseURL": fake.url,
                     "dimensions": 8}
        entry = {"config": {"dbPath": str(tmp_path / "lancedb"), "embedding": embedding}}
        (tmp_path / "openclaw.json").write_text(
            json.dumps({"plugins": {"entries": {"memory-lancedb-pro": entry}}}), encoding="utf-8")
        report = _doctor(tmp_path, OC_EMBED_KEY=KEY)
        ours = _doctor(tmp_path, OC_EMBED_KEY=KEY, MEMORY_MCP_EMBEDDING_PROVIDER="hash")

    checks = {check["name"]: check for check in report["checks"]}  # type: ignore[attr-defined]
    detail = checks["embedding_settings"]["detail"]
    assert detail.startswith(f"embedding settings from {tmp_path / 'openclaw.json'}")
    assert "model bge-m3" in detail and "API key from env OC_EMBED_KEY (SecretRef)" in detail
    assert checks["embedder"]["status"] == "ok", checks["embedder"]
    assert fake.state.requests and fake.state.requests[0].headers["authorization"] == f"Bearer {KEY}"
    [mine] = [c for c in ours["checks"] if c["name"] == "embedding_settings"]  # type: ignore[attr-defined]
    assert mine["detail"] == "embedding settings from MEMORY_MCP_EMBEDDING_*: provider hash"
