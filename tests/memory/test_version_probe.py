"""The version probe: LanceDB is asked again whenever the version directory may have changed."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from app.memory.store import Store
from app.memory.version_probe import VersionProbe
from tests.conftest import SettingsFactory
from tests.memory.test_vector_cache import _external, _rows, _store


def _age(directory: Path, seconds: float = 60.0) -> None:
    """Backdate the directory's mtime, as if its last commit was a minute ago."""
    stamp = time.time() - seconds
    os.utime(directory, (stamp, stamp))


def _probe(store: Store) -> VersionProbe:
    probe = store.probe
    assert probe.versions_dir is not None and probe.versions_dir.name == "_versions"
    return probe


def test_a_quiet_unchanged_directory_answers_without_asking_lancedb(make_settings: SettingsFactory) -> None:
    store = _store(make_settings)
    probe = _probe(store)
    _age(probe.versions_dir)
    first = probe.current()
    reads = probe.reads
    assert [probe.current() for _ in range(5)] == [first] * 5
    assert probe.reads == reads
    assert first == store.version()


def test_a_directory_changed_moments_ago_is_asked_about_every_time(make_settings: SettingsFactory) -> None:
    # A coarse-clock mtime can stay the same across two quick commits, so a fresh stamp is not trusted.
    store = _store(make_settings)
    probe = _probe(store)
    before = probe.reads
    probe.current()
    probe.current()
    assert probe.reads == before + 2


def test_another_process_commit_after_a_quiet_spell_is_seen_by_the_next_search(
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
    assert probe.current() > version
    [hit] = store.vector_search(row["vector"], None, 1)
    assert hit["id"] == row["id"] and hit["score"] > 0.999


def test_without_a_version_directory_every_call_asks(tmp_path: Path) -> None:
    versions = iter(range(1, 100))
    probe = VersionProbe(tmp_path / "missing", lambda: next(versions))
    assert [probe.current(), probe.current(), probe.current()] == [1, 2, 3]
    assert probe.versions_dir is None and probe.reads == 3
