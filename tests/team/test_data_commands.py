"""``memory-mcp doctor|export|import|reembed`` on an s3:// table (a real S3-compatible server)."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from app.cli import main
from app.memory.service import MemoryService
from tests.conftest import SettingsFactory
from tests.support.s3 import Bucket
from tests.team.servers import table

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def run(make_settings: SettingsFactory, s3_bucket: Bucket, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> Run:
    """``memory-mcp …`` in this process, configured the way a team member would: the URI and options."""
    make_settings()  # clears MEMORY_MCP_* and moves to tmp_path
    for name, value in s3_bucket.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MEMORY_MCP_EMBEDDING_PROVIDER", "hash")
    monkeypatch.setenv("MEMORY_MCP_URL", "http://127.0.0.1:9")  # doctor's server probe: nothing listens

    def invoke(*words: str, stdin: str | None = None) -> tuple[int, str, str]:
        if stdin is not None:
            monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
        capsys.readouterr()
        code = main(list(words))
        out = capsys.readouterr()
        return code, out.out, out.err

    return invoke


async def _seed(make_settings: SettingsFactory, bucket: Bucket, count: int) -> list[str]:
    settings = make_settings(db_path=bucket.uri(), storage_options=bucket.s3.storage_options())
    async with MemoryService.open(settings) as service:
        with anyio.fail_after(60):
            return [(await service.remember(f"team fact number {i}")).memory_id for i in range(count)]


async def test_doctor_checks_the_table_in_the_bucket_and_compacts_it(
        run: Run, make_settings: SettingsFactory, s3_bucket: Bucket) -> None:
    await _seed(make_settings, s3_bucket, 12)
    code, out, _ = await anyio.to_thread.run_sync(run, "doctor", "--json")
    checks = {c["name"]: c for c in json.loads(out)["checks"]}
    assert code == 0, out
    assert "object storage" in checks["db_path"]["detail"]
    assert checks["table"]["status"] == "ok" and "(12 rows" in checks["table"]["detail"]
    assert s3_bucket.uri() in checks["table"]["detail"]
    assert "no lock files" in checks["write_lock"]["detail"]
    assert checks["kanban_db"]["status"] == "ok"
    code, _, err = await anyio.to_thread.run_sync(run, "doctor", "--compact", "--json")
    assert code == 0 and f"compacted {s3_bucket.uri()}/memories" in err
    assert len(table(s3_bucket).to_arrow()) == 12


async def test_doctor_names_an_unreachable_bucket(run: Run, s3_bucket: Bucket) -> None:
    code, out, _ = await anyio.to_thread.run_sync(run, "doctor", "--json", "--db", "s3://no-such-bucket-here/x")
    [check] = [c for c in json.loads(out)["checks"] if c["name"] == "table"]
    assert code == 1 and check["status"] == "fail"
    assert "MEMORY_MCP_STORAGE_OPTIONS" in check["fix"]


async def test_export_import_and_reembed_work_on_uris(run: Run, make_settings: SettingsFactory,
                                                      s3_bucket: Bucket, tmp_path: Path) -> None:
    ids = await _seed(make_settings, s3_bucket, 12)
    code, _, err = await anyio.to_thread.run_sync(run, "export", "--vectors", "--out", str(tmp_path / "dump.jsonl"))
    assert code == 0, err
    lines = (tmp_path / "dump.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 13 and sorted(json.loads(line)["id"] for line in lines[1:]) == sorted(ids)

    copy = s3_bucket.uri("copy")
    for expected in (12, 0):  # a second import finds every row there already
        code, out, err = await anyio.to_thread.run_sync(run, "import", str(tmp_path / "dump.jsonl"), "--db", copy,
                                                        "--json")
        assert code == 0, err
        assert json.loads(out)["written"] == expected
    assert sorted(table(s3_bucket, prefix="copy").to_arrow().column("id").to_pylist()) == sorted(ids)

    code, out, err = await anyio.to_thread.run_sync(run, "reembed", "--provider", "hash", "--into",
                                                    s3_bucket.uri("reembedded"), "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["written"] == 12 and f"MEMORY_MCP_DB_PATH={s3_bucket.uri('reembedded')}" in report["switch"]
    assert len(table(s3_bucket, prefix="reembedded").to_arrow()) == 12
