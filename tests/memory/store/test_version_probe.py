"""The version probe: the table's version from the directory's stamp, its files, or LanceDB."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

from app.memory.store import version_probe
from app.memory.store.table import Store
from app.memory.store.version_probe import HINT_FILE, VersionProbe, manifest_name, manifest_version, read_latest
from tests.conftest import SettingsFactory
from tests.memory.index.test_vector_cache import _external, _rows, _store


def _age(directory: Path, seconds: float = 60.0) -> None:
    """Backdate the directory's mtime, as if its last commit was a minute ago."""
    stamp = time.time() - seconds
    os.utime(directory, (stamp, stamp))


def _freshen(directory: Path) -> None:
    """Stamp the directory a minute ahead, so however slow the test runs it never looks quiet."""
    _age(directory, -60.0)


def _probe(store: Store) -> VersionProbe:
    probe = store.probe
    assert probe.versions_dir is not None and probe.versions_dir.name == "_versions"
    return probe


def _hint(directory: Path, payload: bytes) -> None:
    (directory / HINT_FILE).write_bytes(payload)


def _versions_dir(tmp_path: Path, versions: range, hint: object) -> Path:
    directory = tmp_path / "_versions"
    directory.mkdir()
    for version in versions:
        (directory / manifest_name(version)).write_bytes(b"manifest")
    _hint(directory, json.dumps({"version": hint}).encode())
    return directory


def test_lance_names_its_manifests_as_the_probe_reads_them(make_settings: SettingsFactory) -> None:
    # The file layout is Lance's, not ours: if an upgrade changes it, this fails before searches go stale.
    store = _store(make_settings)
    directory = _probe(store).versions_dir
    assert (directory / manifest_name(store.version())).is_file()
    assert not (directory / manifest_name(store.version() + 1)).exists()
    assert json.loads((directory / HINT_FILE).read_bytes())["version"] == store.version()
    assert read_latest(directory) == store.version()


def test_a_quiet_unchanged_directory_answers_without_reading_anything(make_settings: SettingsFactory) -> None:
    store = _store(make_settings)
    probe = _probe(store)
    _age(probe.versions_dir)
    first = probe.current()
    reads, file_reads = probe.reads, probe.file_reads
    assert [probe.current() for _ in range(5)] == [first] * 5
    assert (probe.reads, probe.file_reads) == (reads, file_reads)
    assert first == store.version()


def test_a_directory_changed_moments_ago_is_read_from_its_files_every_time(make_settings: SettingsFactory) -> None:
    # A coarse-clock mtime can stay the same across two quick commits, so a fresh stamp is not trusted.
    store = _store(make_settings)
    probe = _probe(store)
    _freshen(probe.versions_dir)
    reads, file_reads = probe.reads, probe.file_reads
    assert [probe.current(), probe.current()] == [store.version()] * 2
    assert probe.file_reads == file_reads + 2 and probe.reads == reads


def test_our_own_commits_are_seen_at_once(make_settings: SettingsFactory) -> None:
    store = _store(make_settings)
    probe = _probe(store)
    for seed in range(3):
        before = probe.current()
        store.add(_rows(1, "global", 100 + seed))
        assert probe.current() == store.version() == before + 1
    assert probe.reads == 0


def test_another_process_commit_after_a_quiet_spell_is_noticed_by_the_next_search_and_read_in_the_background(
    make_settings: SettingsFactory,
) -> None:
    settings = make_settings(embedding_dimensions=64)
    store = _store(make_settings)
    probe = _probe(store)
    _age(probe.versions_dir)
    [row] = _rows(1, "agent:x", 21)
    assert store.vector_search(row["vector"], None, 1)[0]["id"] != row["id"]  # the probe now trusts the stamp
    version = probe.current()
    _external(settings.db_path, {"kind": "add", "row": {**row, "vector": np.asarray(row["vector"]).tolist()}})
    assert probe.current() == store.version() == version + 1
    store.vector_search(row["vector"], None, 1)  # answers at the cache's version and starts the catch-up
    assert store.sync is not None and store.sync.wait_idle(30) and store.sync.background_runs == 1
    [hit] = store.vector_search(row["vector"], None, 1)
    assert hit["id"] == row["id"] and hit["score"] > 0.999


def test_a_lagging_hint_still_gives_the_newest_manifest(make_settings: SettingsFactory) -> None:
    store = _store(make_settings)
    store.add(_rows(1, "global", 31))
    store.add(_rows(1, "global", 32))
    probe = _probe(store)
    _freshen(probe.versions_dir)
    _hint(probe.versions_dir, json.dumps({"version": store.version() - 2}).encode())
    file_reads = probe.file_reads
    assert probe.current() == store.version()
    assert probe.file_reads == file_reads + 1 and probe.reads == 0


def test_a_missing_or_unreadable_hint_asks_lancedb(make_settings: SettingsFactory) -> None:
    store = _store(make_settings)
    probe = _probe(store)
    _freshen(probe.versions_dir)
    for payload in (b"", b"{", b'{"version": "7"}', b'{"version": true}', b'{"v": 3}', b"[1]", b'{"version": -1}'):
        _hint(probe.versions_dir, payload)
        before = probe.reads
        assert probe.current() == store.version()
        assert probe.reads == before + 1, payload
    (probe.versions_dir / HINT_FILE).unlink()
    assert probe.current() == store.version() and probe.reads == before + 2


def test_a_hint_whose_manifest_is_not_there_asks_lancedb(tmp_path: Path) -> None:
    # Lance's older naming ({version}.manifest), or a hint written ahead of its manifest.
    directory = tmp_path / "_versions"
    directory.mkdir()
    for version in (1, 2, 3):
        (directory / f"{version}.manifest").write_bytes(b"manifest")
    _hint(directory, b'{"version": 3}')
    assert read_latest(directory) is None
    (tmp_path / "ahead").mkdir()
    assert read_latest(_versions_dir(tmp_path / "ahead", range(1, 4), 4)) is None


def test_read_latest_steps_up_from_the_hint_and_stops_at_the_first_gap(tmp_path: Path) -> None:
    directory = _versions_dir(tmp_path, range(5, 12), 7)  # versions 1-4 cleaned up, hint 4 behind
    (directory / manifest_name(13)).write_bytes(b"manifest")  # not reachable: no 12
    assert read_latest(directory) == 11


def test_a_hint_too_far_behind_is_left_to_lancedb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = _versions_dir(tmp_path, range(1, 6), 1)
    assert read_latest(directory) == 5
    monkeypatch.setattr(version_probe, "_MAX_STEPS", 3)
    assert read_latest(directory) is None


def test_without_a_version_directory_every_call_asks(tmp_path: Path) -> None:
    versions = iter(range(1, 100))
    probe = VersionProbe(tmp_path / "missing", lambda: next(versions))
    assert [probe.current(), probe.current(), probe.current()] == [1, 2, 3]
    assert probe.versions_dir is None and probe.reads == 3 and probe.file_reads == 0


def test_a_commit_reads_the_version_it_builds_on_from_the_files(make_settings: SettingsFactory) -> None:
    store = _store(make_settings)
    probe = _probe(store)
    file_reads = probe.file_reads
    for seed in range(4):
        store.add(_rows(2, "global", 200 + seed))
    assert probe.file_reads >= file_reads + 4 and probe.reads == 0
    assert store.cache is not None and store.cache.version == store.version()


def test_manifest_names_read_back_as_their_versions_in_both_namings() -> None:
    for version in (1, 2, 41, 3_600, 2**40):
        assert manifest_version(manifest_name(version)) == version
        assert manifest_version(f"{version}.manifest") == version  # V1 naming
    for other in ("latest_version_hint.json", "x.manifest", "12.manifest.tmp", ".manifest", "12"):
        assert manifest_version(other) is None
