"""The compaction lease on object storage: one holder at a time, also when processes race for it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from datetime import timedelta

import pytest

from app.memory.store import connection
from app.memory.store.lease import CompactionLease, lease_table_name
from tests.conftest import SettingsFactory
from tests.support.s3 import Bucket

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


def test_a_held_lease_is_refused_to_others_until_released_or_expired(make_settings: SettingsFactory,
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
    brief = CompactionLease(db, "memories", holder="brief", ttl=timedelta(0))
    assert brief.try_acquire() is not None  # taken and never released, but already expired
    assert second.try_acquire() is not None
    assert lease_table_name("memories") in db.list_tables().tables


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
