"""The TypeScript SDK, as Claude Code uses it, lists and gets prompts, reads resources, completes an id and
hears of a change made through REST (``@modelcontextprotocol/sdk@1``, installed as ``test_spec_sse_client``)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx

from tests.mcp.test_spec_sse_client import NODE, NPM, ts_sdk_modules  # noqa: F401 - the fixture
from tests.support.server import LiveServer

if NODE is not None and NPM is not None:  # collected wherever a node runtime exists (CI has one)

    def test_the_typescript_sdk_uses_prompts_resources_completion_and_subscriptions(
            live_server: LiveServer, ts_sdk_modules: Path) -> None:  # noqa: F811 - the fixture
        assert NODE is not None
        created = httpx.post(f"{live_server.url}/api/kanban/tasks", timeout=30,
                             json={"title": "Seen from TypeScript", "assignee": "claude-code"})
        task_id = created.json()["id"]
        script = Path(__file__).with_name("ts_live_client.cjs")
        env = {**os.environ, "NODE_PATH": str(ts_sdk_modules)}
        done = subprocess.run([NODE, str(script), live_server.url, task_id], capture_output=True, text=True,
                              timeout=120, env=env, check=False)
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert result["prompts"] == ["recall", "board", "my-tasks", "handoff"]
        assert f"{task_id} Seen from TypeScript" in result["board"]
        assert result["resources"][:2] == ["board://current", f"task://{task_id}"]
        assert result["task"]["mimeType"] == "text/markdown" and "# " + task_id in result["task"]["text"]
        assert result["completed"] == [task_id]
        assert f"task://{task_id}" in result["updated"]
        assert "ts-sdk: note 0 from the TypeScript test" in result["after"]
        capabilities = result["capabilities"]
        assert capabilities["resources"] == {"subscribe": True, "listChanged": True}
        assert "completions" in capabilities and "logging" in capabilities and "prompts" in capabilities
