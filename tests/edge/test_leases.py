"""Which lease gives way: never used, then unused for a while, then recently used; busy ones never."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from app.edge import leases
from app.edge.leases import LeaseTable
from app.errors import Unavailable


@pytest.fixture
def now(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    clock = [0.0]
    monkeypatch.setattr(leases, "clock", lambda: clock[0])
    return clock


def _table(evicted: list[str], per_owner: int = 3) -> tuple[LeaseTable, Callable[[str], None]]:
    table = LeaseTable("sessions", per_owner=per_owner, total=100)

    def admit(key: str) -> None:
        table.admit(key, "anonymous", lambda: evicted.append(key))

    return table, admit


def test_a_lease_unused_for_minutes_gives_way_before_one_used_recently_even_if_that_one_is_older(
    now: list[float],
) -> None:
    evicted: list[str] = []
    table, admit = _table(evicted)
    admit("recent")
    admit("stale")
    admit("fresh")
    with table.in_use("stale"):
        pass
    now[0] += leases.RECENT_USE_S - 5
    with table.in_use("recent"):  # used long after "stale", but "stale" was used after "recent" was opened
        pass
    with table.in_use("fresh"):
        pass
    now[0] += 10  # "stale" is now unused for longer than RECENT_USE_S; "recent" and "fresh" are not
    admit("newcomer")
    assert evicted == ["stale"]


def test_a_lease_that_never_made_a_call_gives_way_first_whatever_its_age(now: list[float]) -> None:
    evicted: list[str] = []
    table, admit = _table(evicted)
    admit("worker")
    with table.in_use("worker"):
        pass
    now[0] += 1_000
    admit("abandoned")
    admit("also-working")
    with table.in_use("also-working"):
        pass
    now[0] += 1_000  # "worker" has not called for a long time; "abandoned" never did
    with table.in_use("abandoned", call=False):  # a notification is not a call
        pass
    admit("newcomer")
    assert evicted == ["abandoned"]


def test_recently_used_leases_give_way_least_recently_used_first_when_nothing_else_can(now: list[float]) -> None:
    evicted: list[str] = []
    table, admit = _table(evicted, per_owner=2)
    admit("a")
    admit("b")
    for key in ("b", "a"):
        now[0] += 1
        with table.in_use(key):
            pass
    admit("c")
    assert evicted == ["b"]


def test_a_busy_lease_never_gives_way_and_the_newcomer_is_refused_instead(now: list[float]) -> None:
    evicted: list[str] = []
    table, admit = _table(evicted, per_owner=1)
    admit("busy")
    with table.in_use("busy"), pytest.raises(Unavailable) as refused:
        admit("newcomer")
    assert refused.value.code == "too_many_sessions" and evicted == []
