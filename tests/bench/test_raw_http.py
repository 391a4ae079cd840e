"""The benchmark's lean load client against a real server: statuses and bodies read correctly."""

from __future__ import annotations

import json

from bench.support.server import RawConnection
from tests.conftest import SettingsFactory
from tests.support.server import run_server


async def test_raw_connection_reads_successes_and_errors_on_one_keep_alive_connection(
    make_settings: SettingsFactory,
) -> None:
    with run_server(make_settings()) as server:
        connection = await RawConnection.open(server.url)
        try:
            status, body = await connection.request("POST", "/api/lancedb/memories", {"text": "raw client fact"})
            assert 200 <= status < 300
            memory_id = json.loads(body)["id"]
            status, body = await connection.request("POST", "/api/lancedb/memories", {"text": ""})
            assert status == 422 and json.loads(body)["code"] == "invalid_input"
            status, body = await connection.request("GET", "/api/lancedb/memories?limit=5")
            assert status == 200 and [m["id"] for m in json.loads(body)] == [memory_id]
        finally:
            await connection.close()
