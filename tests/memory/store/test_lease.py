"""The compaction lease on object storage: one holder at a time, also when processes race for it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TypeVar

import pytest

from app.memory.store import connection
from app.memory.store.lease import CompactionLease, lease_table_name
from tests.conftest import SettingsFactory
from tests.support.s3 import Bucket

T = TypeVar("T")
RACERS = 4
ROUNDS = 3

_RACER = textwrap.dedent("""
    import json, sys, time
    from app.memory.store import connection
    from app.memory.store.lease import CompactionLease
    from app.settings import Settings

    uri, options, table, start = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], float(sys.argv[4])
    lease = CompactionLease(connection.connect(Settings(db_path=uri, storage_options=options)), table)
    lease._lease_table()  # created (or opened) before the start, so the race is over the update alone
    while time.time() < start:  # all racers update at the same moment: the most contention we can make
        pass
    print(json.dumps({"holder": lease.holder, "expires": lease.try_acquire()}))
""")


def test_a_held_lease_is_refused_to_others_until_released_or_lapsed(make_settings: SettingsFactory,
                                                                     s3_bucket: Bucket) -> None:
    settings = make_settings(db_path=s3_bucket.uri(), storage_options=s3_bucket.s3.storage_options())
    db = connection.connect(settings)
    first = CompactionLease(db, "memories", holder="first")
    second = CompactionLease(connection.connect(settings), "memories", holder="second")

    with first.held() as mine:
        assert mine
        assert second.read()[0] == "first"
        assert second.try_acquire() is None
    with second.held() as mine:  # released: free again
        assert mine
    dead = CompactionLease(db, "memories", holder="dead")
    assert dead.try_acquire() is not None  # taken and never renewed nor released: its holder died
    impatient = CompactionLease(connection.connect(settings), "memories", holder="impatient", ttl=timedelta(0))
    assert impatient.try_acquire() is not None  # seen unchanged for its TTL (zero): lapsed
    assert lease_table_name("memories") in db.list_tables().tables


def test_a_dead_holders_lease_lapses_once_another_instance_has_seen_it_unchanged_for_the_ttl(
        make_settings: SettingsFactory, s3_bucket: Bucket) -> None:
    settings = make_settings(db_path=s3_bucket.uri(), storage_options=s3_bucket.s3.storage_options())
    dead = CompactionLease(connection.connect(settings), "memories", holder="dead")
    assert dead.try_acquire() is not None
    ttl = timedelta(seconds=1)
    waiting = CompactionLease(connection.connect(settings), "memories", holder="waiting", ttl=ttl)
    first_look = time.monotonic()
    assert waiting.try_acquire() is None  # the first look starts its own clock
    taken = poll(waiting.try_acquire, lambda expires: expires is not None, within_s=30)
    assert time.monotonic() - first_look >= ttl.total_seconds()
    assert taken is not None and waiting.read()[0] == "waiting"


def test_an_expiry_in_the_past_by_this_clock_does_not_free_a_lease_that_is_being_renewed(
        make_settings: SettingsFactory, s3_bucket: Bucket) -> None:
    """Clocks disagree: the holder's stamp looks long past here. Only a row left unchanged for the TTL,
    on this instance's own clock, lapses."""
    settings = make_settings(db_path=s3_bucket.uri(), storage_options=s3_bucket.s3.storage_options())
    holder = CompactionLease(connection.connect(settings), "memories", holder="slow clock")
    holder._lease_table().update(where="holder = ''", values={"holder": "slow clock", "expires_ms": 1})
    other = CompactionLease(connection.connect(settings), "memories", holder="other", ttl=timedelta(seconds=1))
    assert other.try_acquire() is None  # an expiry in 1970 by this clock, yet just seen for the first time
    expires = 1
    for _ in range(3):  # the holder renews faster than the other's TTL: never lapses
        looked = time.monotonic()
        renewed = holder.renew(expires)
        assert renewed is not None and renewed > expires
        expires = renewed
        assert other.try_acquire() is None
        assert time.monotonic() - looked < 1.0 or other.read()[0] == "slow clock"
    assert holder.renewals == 3


def test_the_holder_renews_the_lease_while_it_works_and_learns_when_it_was_taken_over(
        make_settings: SettingsFactory, s3_bucket: Bucket) -> None:
    settings = make_settings(db_path=s3_bucket.uri(), storage_options=s3_bucket.s3.storage_options())
    holder = CompactionLease(connection.connect(settings), "memories", holder="worker", ttl=timedelta(seconds=2),
                             renew_every=timedelta(milliseconds=50))
    observer = CompactionLease(connection.connect(settings), "memories", holder="observer")
    with holder.held() as mine:
        assert mine
        seen = {observer.read()[1]}
        poll(lambda: seen.add(observer.read()[1]) or len(seen), lambda n: n >= 3, within_s=30)  # renewed twice
        assert observer.read()[0] == "worker" and holder.renewals >= 2
        observer._lease_table().update(where="holder = 'worker'", values={"holder": "usurper"})
        poll(lambda: holder.lost, bool, within_s=30)
    assert observer.read()[0] == "usurper"  # a holder that lost the lease does not release the new one's


def poll(read: Callable[[], T], done: Callable[[T], object], *, within_s: float) -> T:
    """Call ``read`` until ``done(value)``; fails past ``within_s`` (a condition with a deadline)."""
    deadline = time.monotonic() + within_s
    while True:
        value = read()
        if done(value):
            return value
        assert time.monotonic() < deadline, f"not done within {within_s} s: {value!r}"
        time.sleep(0.02)


@pytest.mark.slow
def test_of_processes_racing_for_a_free_lease_exactly_one_takes_it(make_settings: SettingsFactory,
                                                                    s3_bucket: Bucket) -> None:
    settings = make_settings(db_path=s3_bucket.uri(), storage_options=s3_bucket.s3.storage_options())
    options = json.dumps(s3_bucket.s3.storage_options())
    for round_number in range(ROUNDS):
        table = f"round{round_number}"
        start = f"{time.time() + 4.0}"  # past every racer's start-up (imports, connecting)
        racers = [subprocess.Popen([sys.executable, "-c", _RACER, settings.db_uri, options, table, start],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(RACERS)]
        results = []
        for racer in racers:
            out, err = racer.communicate(timeout=120)
            assert racer.returncode == 0, err.decode()
            results.append(json.loads(out.decode().strip().splitlines()[-1]))
        winners = [r["holder"] for r in results if r["expires"] is not None]
        assert len(winners) == 1, results
        holder, _ = CompactionLease(connection.connect(settings), table).read()
        assert holder == winners[0]
