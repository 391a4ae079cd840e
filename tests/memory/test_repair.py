"""Damage another process leaves in the shared table (files gone under a live manifest) is seen, refused and
repaired: while it lasts reads answer from the index, writes wait in the journal and /readyz answers 503
table_damaged; ``memory-mcp repair`` brings the table back with every acknowledged write."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import lancedb
import pytest

from app.memory import repair
from app.memory.store.recovery import list_manifests
from tests.conftest import SettingsFactory
from tests.mcp.clients import poll_until
from tests.support.server import LiveServer, run_server

REPO = Path(__file__).resolve().parents[2]


def cli(live: LiveServer, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(live.settings.db_path.parent), "PYTHONPATH": str(REPO),  # type: ignore[union-attr]
           "MEMORY_MCP_DB_PATH": str(live.settings.db_path), "MEMORY_MCP_KANBAN_DB": str(live.settings.kanban_db),
           "MEMORY_MCP_EMBEDDING_PROVIDER": "hash", "MEMORY_MCP_OPENCLAW_CONFIG": ""}
    return subprocess.run([sys.executable, "-m", "app.cli", *argv, "--json"], env=env, capture_output=True,
                          text=True, timeout=120, check=False, cwd=live.settings.db_path.parent)  # type: ignore[union-attr]


async def remember_flushed(http: httpx.AsyncClient, live: LiveServer, texts: list[str]) -> list[str]:
    """Remember each text in a commit of its own."""
    writer = live.app.state.services.memory.writer
    ids = []
    for text in texts:
        ids.append((await http.post("/memories", json={"text": text})).json()["id"])
        await live.on_server_loop(writer.flush())
    return ids


def table_ids(db: Path) -> list[str]:
    return [str(i) for i in lancedb.connect(str(db)).open_table("memories").to_arrow().column("id").to_pylist()]


async def readyz(http: httpx.AsyncClient, live: LiveServer) -> httpx.Response:
    return await http.get(f"{live.url}/readyz")


async def damaged_then_repaired(live: LiveServer, break_table: Any) -> dict[str, Any]:
    db: Path = live.settings.db_path  # type: ignore[assignment]
    async with httpx.AsyncClient(base_url=f"{live.url}/api/lancedb", timeout=30) as http:
        before = await remember_flushed(http, live, [f"written before the damage {i}" for i in range(6)])
        break_table(db / "memories.lance")
        refused = await poll_until(lambda: readyz(http, live), lambda r: r.status_code == 503, within_s=10)
        during = (await http.post("/memories", json={"text": "acknowledged while the table is damaged"}))
        listed = (await http.get("/memories", params={"limit": 50})).json()
        doctor = await asyncio.to_thread(cli, live, "doctor")
        repaired = await asyncio.to_thread(cli, live, "repair")
        whole = await poll_until(lambda: readyz(http, live), lambda r: r.status_code == 200, within_s=20)
        await live.on_server_loop(live.app.state.services.memory.writer.flush())
        after = (await http.get("/memories", params={"limit": 50})).json()
    return {"before": before, "refused": refused, "during": during, "listed": listed, "doctor": doctor,
            "repaired": repaired, "whole": whole, "after": after, "stored": table_ids(db)}


def _check_outcome(outcome: dict[str, Any]) -> None:
    refused = outcome["refused"].json()
    assert refused["code"] == "table_damaged" and "memory-mcp repair" in refused["detail"]
    assert outcome["during"].status_code == 200  # the write waits in the journal, acknowledged
    acknowledged = {*outcome["before"], outcome["during"].json()["id"]}
    assert {m["id"] for m in outcome["listed"]} == acknowledged  # reads answer from the index and the journal
    doctor = json.loads(outcome["doctor"].stdout)
    assert outcome["doctor"].returncode == 1 and "Traceback" not in outcome["doctor"].stderr
    [damage] = [c for c in doctor["checks"] if c["name"] == "table_damage"]
    assert damage["status"] == "fail" and "memory-mcp repair" in damage["fix"]
    assert outcome["repaired"].returncode == 0, outcome["repaired"].stderr
    backup = Path(json.loads(outcome["repaired"].stdout)["backup"])
    assert backup.parent.name == "backups" and backup.exists()
    assert outcome["whole"].json()["status"] == "ok"
    assert {m["id"] for m in outcome["after"]} == acknowledged
    assert sorted(outcome["stored"]) == sorted(acknowledged)  # whole again, every row once


@pytest.fixture
def quick_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(repair, "CHECK_EVERY_S", 0.2)


async def test_a_deleted_data_file_is_seen_refused_and_repaired(make_settings: SettingsFactory,
                                                                quick_checks: None) -> None:
    def delete_a_data_file(table: Path) -> None:
        sorted((table / "data").iterdir())[2].unlink()

    with run_server(make_settings(flush_interval_s=0.05)) as live:
        _check_outcome(await damaged_then_repaired(live, delete_a_data_file))


async def test_a_truncated_newest_manifest_is_seen_refused_and_repaired(make_settings: SettingsFactory,
                                                                        quick_checks: None) -> None:
    def truncate_the_newest_manifest(table: Path) -> None:
        list_manifests(table / "_versions")[0].path.write_bytes(b"")

    with run_server(make_settings(flush_interval_s=0.05)) as live:
        _check_outcome(await damaged_then_repaired(live, truncate_the_newest_manifest))


async def test_a_drop_racing_our_flush_is_seen_refused_and_repaired(make_settings: SettingsFactory,
                                                                    quick_checks: None) -> None:
    """What ``drop_table`` leaves when our files land while it deletes: its files gone, ours and our newest
    manifest left, naming the deleted ones."""
    def dropped_under_us(table: Path) -> None:
        newest = list_manifests(table / "_versions")[0]
        for manifest in list_manifests(table / "_versions")[1:]:
            manifest.path.unlink()
        for data in sorted((table / "data").iterdir())[:-1]:
            data.unlink()
        assert newest.path.exists()

    with run_server(make_settings(flush_interval_s=0.05)) as live:
        _check_outcome(await damaged_then_repaired(live, dropped_under_us))
