"""Recovery at open (P10, REC-01): a damaged newest version is quarantined, the previous one opens, and the
write journal folds the writes of the quarantined versions in again, so no acknowledged write is lost."""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from pathlib import Path

import httpx
import lancedb
import pytest

from app.memory.embeddings.hashing import HashEmbedder
from app.memory.service import MemoryService
from app.memory.store.recovery import MAX_QUARANTINED, StoreUnrecoverable, list_manifests, version_of_name, versions_dir
from app.memory.store.schema import build_schema
from app.settings import Settings
from tests.conftest import SettingsFactory
from tests.support.server import run_server

SESSIONS = 3
WRITES_PER_SESSION = 2


async def _write_history(settings: Settings) -> dict[int, str]:
    """Several service sessions, one memory per commit; returns table version -> id that commit added."""
    added: dict[int, str] = {}
    for session in range(SESSIONS):
        async with MemoryService.open(settings) as service:
            for write in range(WRITES_PER_SESSION):
                result = await service.remember(f"recovery fact {session}-{write} about subject {session * 7 + write}")
                await service.writer.flush()  # one commit per write
                added[(await service.stats()).table_version] = result.memory_id
    return added


def _settings(make_settings: SettingsFactory) -> Settings:
    return make_settings(compact_every_commits=1000)  # no compaction: one version per write, as in the map


def _damage(settings: Settings, newest: int = 1, how: str = "truncate") -> list[Path]:
    """Damage the ``newest`` manifests the way a power loss does; returns their paths."""
    paths = [m.path for m in list_manifests(versions_dir(settings))[:newest]]
    for path in paths:
        if how == "truncate":
            path.write_bytes(b"")
        elif how == "zero_fill":
            path.write_bytes(b"\0" * path.stat().st_size)
        elif how == "garble":  # footer intact, lengths inside are garbage: LanceDB panics
            raw = path.read_bytes()
            path.write_bytes(raw[:8] + bytes(b ^ 0xFF for b in raw[8:-16]) + raw[-16:])
        else:  # "bitflip": footer and lengths intact, the message does not decode
            raw = path.read_bytes()
            path.write_bytes(raw[:200] + bytes(b ^ 0xFF for b in raw[200:600]) + raw[600:])
    return paths


async def _ids(service: MemoryService) -> set[str]:
    return {m.id for m in await service.list_memories(limit=200)}


async def _table_ids(service: MemoryService) -> set[str]:
    """The ids in the table itself once the journal is flushed into it."""
    await service.writer.flush()
    return {str(row["id"]) for row in service.store.scan(None, ["id"]).to_pylist()}


def _quarantined_files(settings: Settings) -> list[Path]:
    root = settings.db_path / "quarantine"
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


@pytest.mark.parametrize("how", ["truncate", "zero_fill", "garble", "bitflip"])
async def test_a_damaged_newest_manifest_is_quarantined_the_previous_version_opens_and_its_write_is_flushed_again(
    make_settings: SettingsFactory, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    settings = _settings(make_settings)
    added = await _write_history(settings)
    head = max(added)
    [damaged] = _damage(settings, how=how)
    damaged_bytes = damaged.read_bytes()
    with caplog.at_level(logging.ERROR, logger="app.memory.store.recovery"):
        async with MemoryService.open(settings) as service:
            health = service.health()
            assert await _ids(service) == set(added.values())  # the head's write is served from the journal
            assert await _table_ids(service) == set(added.values())  # and folded into the table again
            assert service.store.version() == head  # in one commit on top of the version that opened
    assert health["ready"] is True
    assert health["degraded"] is True
    assert health["recovered_from_version"] == head - 1
    assert health["quarantined_versions"] == [head]
    quarantine = Path(health["quarantine_path"])
    assert quarantine.parent == settings.db_path / "quarantine"
    assert (quarantine / damaged.relative_to(settings.db_path)).read_bytes() == damaged_bytes
    assert damaged.read_bytes() != damaged_bytes  # its name is the new commit's, the write flushed again
    report = json.loads((quarantine / "report.json").read_text())
    assert report["quarantined_versions"] == [head] and report["recovered_version"] == head - 1
    [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert f"version(s) {head} quarantined" in record.getMessage()
    assert f"opened version {head - 1}" in record.getMessage()


async def test_after_a_recovery_new_writes_become_the_head_and_survive_a_reopen(
    make_settings: SettingsFactory,
) -> None:
    settings = _settings(make_settings)
    added = await _write_history(settings)
    _damage(settings)
    async with MemoryService.open(settings) as service:
        await service.writer.flush()  # the quarantined head's write, again
        assert service.store.version() == max(added)
        fresh = (await service.remember("written after the recovery")).memory_id
        await service.writer.flush()
        version = (await service.stats()).table_version
    async with MemoryService.open(settings) as service:
        assert (await service.get(fresh)).text == "written after the recovery"
        assert await _ids(service) == await _table_ids(service) == {*added.values(), fresh}
        assert (await service.stats()).table_version == version == max(added) + 1
        assert service.health()["degraded"] is False  # this open found nothing to repair
    assert len([p for p in _quarantined_files(settings) if p.suffix == ".manifest"]) == 1


async def test_a_stale_version_hint_is_quarantined_with_the_manifest(make_settings: SettingsFactory) -> None:
    settings = _settings(make_settings)
    added = await _write_history(settings)
    hint = versions_dir(settings) / "latest_version_hint.json"
    assert json.loads(hint.read_text())["version"] == max(added)
    _damage(settings)
    async with MemoryService.open(settings) as service:
        quarantine = Path(service.health()["quarantine_path"])
    assert (quarantine / hint.relative_to(settings.db_path)).is_file()


async def test_two_damaged_newest_versions_are_both_quarantined(make_settings: SettingsFactory) -> None:
    settings = _settings(make_settings)
    added = await _write_history(settings)
    head = max(added)
    _damage(settings, newest=2)
    async with MemoryService.open(settings) as service:
        assert service.health()["quarantined_versions"] == [head, head - 1]
        assert service.health()["recovered_from_version"] == head - 2
        assert await _ids(service) == await _table_ids(service) == set(added.values())  # both flushed again


async def test_a_healthy_store_is_not_touched(make_settings: SettingsFactory) -> None:
    settings = _settings(make_settings)
    added = await _write_history(settings)
    before = sorted(p.name for p in versions_dir(settings).iterdir())
    async with MemoryService.open(settings) as service:
        assert await _ids(service) == set(added.values())
        assert service.health()["degraded"] is False and service.writer.depth == 0  # nothing to flush again
        assert "recovered_from_version" not in service.health()
    assert not (settings.db_path / "quarantine").exists()
    assert sorted(p.name for p in versions_dir(settings).iterdir()) == before


async def test_a_store_whose_every_manifest_is_damaged_fails_clearly_and_moves_nothing(
    make_settings: SettingsFactory,
) -> None:
    settings = _settings(make_settings)
    await _write_history(settings)
    every = _damage(settings, newest=len(list_manifests(versions_dir(settings))))
    with pytest.raises(StoreUnrecoverable) as caught:
        async with MemoryService.open(settings):
            pytest.fail("the store opened although no version is readable")
    message = str(caught.value)
    assert str(versions_dir(settings).parent) in message
    assert "nothing was moved" in message and "nothing was deleted" in message
    assert "zero bytes" in message
    assert all(p.exists() for p in every)
    assert not (settings.db_path / "quarantine").exists()


async def test_more_damaged_versions_than_the_bound_are_refused_not_quarantined(
    make_settings: SettingsFactory,
) -> None:
    settings = _settings(make_settings)
    await _write_history(settings)
    damaged = _damage(settings, newest=MAX_QUARANTINED + 1)
    with pytest.raises(StoreUnrecoverable, match=f"At most {MAX_QUARANTINED} newest versions"):
        async with MemoryService.open(settings):
            pytest.fail("the store opened past the bound")
    assert all(p.exists() for p in damaged)


async def test_the_last_remaining_manifest_is_never_quarantined(make_settings: SettingsFactory) -> None:
    # Moving it would leave no version, and the next open would create an empty table over the data.
    settings = _settings(make_settings)
    async with MemoryService.open(settings) as service:
        await service.remember("the only write")
    every = _damage(settings, newest=len(list_manifests(versions_dir(settings))), how="garble")
    with pytest.raises(StoreUnrecoverable, match="no undamaged version"):
        async with MemoryService.open(settings):
            pytest.fail("the store opened although no version is readable")
    [left] = list_manifests(versions_dir(settings))
    assert left.path == every[-1]  # the oldest stays where it was; only the ones above it moved
    assert len([p for p in _quarantined_files(settings) if p.suffix == ".manifest"]) == len(every) - 1


async def test_a_table_with_v1_manifest_names_recovers_too(make_settings: SettingsFactory) -> None:
    settings = _settings(make_settings)
    db = lancedb.connect(str(settings.db_path), read_consistency_interval=timedelta(0))
    db.create_table(settings.table, schema=build_schema(HashEmbedder()),
                    storage_options={"new_table_enable_v2_manifest_paths": "false"})
    added = await _write_history(settings)
    names = {m.path.name for m in list_manifests(versions_dir(settings))}
    assert f"{max(added)}.manifest" in names  # plain version numbers, not u64::MAX - version
    _damage(settings)
    async with MemoryService.open(settings) as service:
        assert service.health()["recovered_from_version"] == max(added) - 1
        assert await _ids(service) == await _table_ids(service) == set(added.values())


def test_manifest_names_map_to_versions_in_both_naming_schemes() -> None:
    assert version_of_name("18446744073709551608.manifest") == 7
    assert version_of_name("7.manifest") == 7
    assert version_of_name("latest_version_hint.json") is None
    assert version_of_name("_latest.manifest") is None
    assert version_of_name("7.manifest.tmp") is None


async def test_readyz_of_a_server_started_on_a_damaged_store_reports_the_recovery(
    make_settings: SettingsFactory,
) -> None:
    settings = _settings(make_settings)
    added = await _write_history(settings)
    _damage(settings)
    with run_server(settings) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
            response = await client.get("/readyz")
            listed = await client.get("/api/lancedb/memories", params={"limit": 50})
    assert response.status_code == 200
    memory = response.json()["memory"]
    assert memory["degraded"] is True
    assert memory["recovered_from_version"] == max(added) - 1
    assert memory["quarantined_versions"] == [max(added)]
    assert memory["quarantine_path"].startswith(str(settings.db_path / "quarantine"))
    assert listed.status_code == 200
    assert {m["id"] for m in listed.json()} == set(added.values())  # the head's write too, from the journal
