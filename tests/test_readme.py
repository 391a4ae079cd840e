"""The README cannot drift from behaviour: its curl examples run against a live server, and the limits and
field names it states are the ones the schemas enforce."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx

from app.mcp.tools_memory import MAX_TOP_K
from app.settings import Settings
from tests.support.server import LiveServer

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
EXAMPLE_BASE = "http://127.0.0.1:3002"


def curl_examples() -> list[str]:
    """Every ``curl`` command of the README's bash blocks, continuation lines joined."""
    commands: list[str] = []
    for block in re.findall(r"```bash\n(.*?)```", README, flags=re.S):
        for command in block.replace("\\\n", " ").splitlines():
            if command.strip().startswith("curl "):
                commands.append(command.strip())
    return commands


def test_the_readme_has_curl_examples_for_both_searches_with_encoded_queries() -> None:
    examples = curl_examples()
    assert len(examples) >= 4
    assert all(EXAMPLE_BASE in c for c in examples)
    searches = [c for c in examples if "search" in c]
    assert searches and all("-G" in c and "--data-urlencode" in c for c in searches)


def test_every_readme_curl_example_succeeds_against_a_live_server(live_server: LiveServer) -> None:
    curl = shutil.which("curl")
    assert curl is not None, "curl is needed to run the README's examples"
    answers = []
    for example in curl_examples():
        command = example.replace(EXAMPLE_BASE, live_server.url).replace("curl ", "curl -w '\\n%{http_code}' ", 1)
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60, check=False)
        body, _, status = done.stdout.rpartition("\n")
        assert done.returncode == 0 and status.startswith("2"), (example, status, body)
        answers.append(json.loads(body))
    remembered = answers[0]["id"]
    for found in answers[1:]:  # each search finds the memory the first example wrote
        assert remembered in [hit["id"] for hit in found], found


def test_the_readme_states_the_limits_the_schemas_enforce(live_server: LiveServer) -> None:
    openapi = httpx.get(f"{live_server.url}/openapi.json").json()

    def query_maximum(path: str, name: str) -> int:
        [param] = [p for p in openapi["paths"][path]["get"]["parameters"] if p["name"] == name]
        return int(param["schema"]["maximum"])

    search_max = query_maximum("/api/lancedb/vector-search", "limit")
    assert query_maximum("/api/lancedb/search", "limit") == search_max
    list_max = query_maximum("/api/lancedb/memories", "limit")
    assert f"`limit` 1–{search_max} for the searches and 1–{list_max} for\nthe list" in README
    assert f"`query, top_k? (1–{MAX_TOP_K}, default 5)" in README
    settings = Settings()
    assert f"text ≤ {settings.max_text_chars:,} characters" in README
    assert f"≤ {settings.max_tags} tags of ≤ {settings.max_tag_chars} characters" in README


def test_the_readme_lists_every_task_status_and_tool_with_the_job_s_id_field() -> None:
    from app.kanban.models import STATUSES, Job

    stated = re.findall(r"`([a-z]+)`", README.split("Statuses:", 1)[1].split("\n", 1)[0])
    assert stated == list(STATUSES)
    snapshot = Path(__file__).resolve().parent / "mcp" / "tool_list.snapshot.json"
    tools = {tool["name"] for tool in json.loads(snapshot.read_text(encoding="utf-8"))}
    tool_rows = README.split("## MCP tools", 1)[1].split("\n\n", 2)[1]
    assert set(re.findall(r"^\| `([a-z_]+)` \|", tool_rows, flags=re.M)) == tools
    assert "`trigger_job` | `task_id?, args?, wait?` | `{id, status" in README and "id" in Job.model_fields


def test_the_readmes_raw_legacy_sse_client_runs_as_printed_and_prints_the_recalled_memory(
    live_server: LiveServer,
) -> None:
    [snippet] = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    stored = httpx.post(f"{live_server.url}/api/lancedb/memories", json={"text": "MCP 記憶 is shared by every agent"})
    assert stored.status_code == 200, stored.text
    done = subprocess.run([sys.executable, "-c", snippet.replace(EXAMPLE_BASE, live_server.url)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    recalled = json.loads(done.stdout)
    assert recalled["memories"][0]["memory_id"] == stored.json()["id"]
