"""Which versions a compaction may prune: those superseded before the window, by the manifests' mtimes."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest

from app.memory.store import retention
from app.memory.store.version_probe import manifest_name

NOW = 1_900_000_000.0
KEEP = timedelta(seconds=120)
NO_MARGIN = timedelta(0)


def _manifests(directory: Path, created_ago_s: dict[int, float], *, v1_names: bool = False) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for version, ago in created_ago_s.items():
        path = directory / (f"{version}.manifest" if v1_names else manifest_name(version))
        path.write_bytes(b"manifest")
        os.utime(path, (NOW - ago, NOW - ago))
    return directory


def _pruned(created_ago_s: dict[int, float], older_than: timedelta) -> set[int]:
    """What Lance removes with that age: versions created before the cutoff, never the newest."""
    newest = max(created_ago_s)
    return {v for v, ago in created_ago_s.items() if ago > older_than.total_seconds() and v != newest}


@pytest.mark.parametrize("v1_names", [False, True])
def test_the_version_that_was_the_newest_when_the_window_began_is_kept_and_older_ones_go(
    tmp_path: Path, v1_names: bool
) -> None:
    created = {1: 900.0, 2: 600.0, 3: 300.0, 4: 60.0, 5: 1.0}  # 3 was the newest until 60 s ago
    versions = _manifests(tmp_path / "_versions", created, v1_names=v1_names)
    age = retention.prune_age(versions, KEEP, now=NOW, margin=NO_MARGIN)
    assert age == timedelta(seconds=300)
    assert _pruned(created, age) == {1, 2}
    assert _pruned(created, KEEP) == {1, 2, 3}  # a cutoff by creation age alone takes 3 too


def test_the_margin_reaches_further_back_for_the_time_lances_own_clock_reads_later(tmp_path: Path) -> None:
    versions = _manifests(tmp_path / "_versions", {1: 900.0, 2: 300.0, 3: 1.0})
    assert retention.prune_age(versions, KEEP, now=NOW, margin=timedelta(seconds=60)) == timedelta(seconds=360)


def test_a_version_created_long_ago_but_superseded_just_now_is_kept(tmp_path: Path) -> None:
    created = {7: 3_600.0, 8: 0.5}  # a quiet hour, then one write
    age = retention.prune_age(_manifests(tmp_path / "_versions", created), KEEP, now=NOW, margin=NO_MARGIN)
    assert _pruned(created, age) == set()


def test_versions_all_younger_than_the_window_give_the_window_plus_the_margin(tmp_path: Path) -> None:
    versions = _manifests(tmp_path / "_versions", {4: 100.0, 5: 50.0, 6: 1.0})
    assert retention.prune_age(versions, KEEP, now=NOW, margin=timedelta(seconds=5)) == KEEP + timedelta(seconds=5)


def test_a_busy_table_keeps_exactly_the_window_when_it_holds_fewer_versions_than_the_bound(tmp_path: Path) -> None:
    created = {v: 200.0 - v for v in range(1, 200)}  # one commit a second
    age = retention.prune_age(_manifests(tmp_path / "_versions", created), KEEP, now=NOW, margin=NO_MARGIN,
                              max_versions=1000)
    assert age == timedelta(seconds=120)
    assert min(set(created) - _pruned(created, age)) == 80  # the newest 120 s ago, and all after it


def test_a_busy_table_keeps_at_most_the_newest_hundred_versions(tmp_path: Path) -> None:
    created = {v: 200.0 - v for v in range(1, 200)}  # one commit a second: 120 versions in the window
    age = retention.prune_age(_manifests(tmp_path / "_versions", created), KEEP, now=NOW, margin=NO_MARGIN)
    kept = set(created) - _pruned(created, age)
    assert len(kept) == retention.MAX_VERSIONS_KEPT == 100 and min(kept) == 100


def test_beyond_the_bound_a_version_newest_within_the_reader_grace_is_kept(tmp_path: Path) -> None:
    created = {v: 5.0 - v / 100 for v in range(1, 400)}  # 399 versions in the last 5 s
    age = retention.prune_age(_manifests(tmp_path / "_versions", created), KEEP, now=NOW, margin=NO_MARGIN)
    assert _pruned(created, age) == set()  # each was the newest less than READER_GRACE ago


def test_on_object_storage_only_this_instances_own_sightings_decide_what_goes() -> None:
    sightings = retention.Sightings()
    assert retention.first_kept_seen(500, sightings, KEEP, now=1_000.0) == 0  # just started: prunes nothing
    sightings.saw(600, now=1_010.0)
    sightings.saw(900, now=1_100.0)
    # At 1_125 the window began at 1_005: nothing seen that early, so by time nothing may go; beyond the
    # newest 100 (of 1_000), the version seen newest 10 s ago (at 1_100: 900) and all after it stay.
    assert retention.first_kept_seen(1_000, sightings, KEEP, now=1_125.0) == 900
    # Much later by this clock alone: 1_000, noted as the newest at 1_125, was already the newest when
    # the window began, so every version before it was superseded before the window and may go.
    assert retention.first_kept_seen(1_000, sightings, KEEP, now=1_300.0) == 1_000
    sightings.saw(10, now=1_400.0)  # an older version seen later says nothing new
    assert sightings.newest_at(1_400.0) == 1_000


def test_without_a_listing_only_the_window_and_margin_apply(tmp_path: Path) -> None:
    margin = timedelta(seconds=60)
    assert retention.prune_age(None, KEEP, now=NOW, margin=margin) == KEEP + margin
    assert retention.prune_age(tmp_path / "missing", KEEP, now=NOW, margin=margin) == KEEP + margin
    odd = tmp_path / "odd"
    odd.mkdir()
    (odd / "latest_version_hint.json").write_text("{}")
    (odd / "x.manifest").write_text("")
    (odd / "12.manifest.tmp").write_text("")
    assert retention.manifest_times(odd) == {}

