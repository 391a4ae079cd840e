"""Hostile input at the service: random arguments either succeed or raise a typed AppError, state intact."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, initialize, invariant, rule

from app.errors import AppError
from app.memory.errors import MemoryNotFound
from tests.reliability.service_runner import ServiceRunner

SCOPES = st.one_of(
    st.none(), st.sampled_from(["global", "agent:claude-code", "project:x", "user:me", "custom:a/b", "bogus:x",
                                "agent:", "", " global ", "x' OR '1'='1", "agent:%", "custom:_"]),
    st.text(max_size=40))
TEXTS = st.one_of(st.text(max_size=200), st.text(alphabet=st.characters(codec="utf-8"), min_size=7990, max_size=8010),
                  st.sampled_from(["", " ", "\x00", "ok\x1b", "fine text", "'; DROP TABLE memories;--"]))
TAGS = st.one_of(st.none(), st.lists(st.text(max_size=70), max_size=40))
IMPORTANCES = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 5), st.just(True))
AGENTS = st.one_of(st.none(), st.sampled_from(["claude-code", "agent:codex", "global", "bad name!", "%"]),
                   st.text(max_size=20))


@pytest.fixture(scope="module")
def runner() -> Iterator[ServiceRunner]:
    with tempfile.TemporaryDirectory() as directory:
        runner = ServiceRunner(Path(directory))
        try:
            yield runner
        finally:
            runner.close()


@settings(max_examples=120, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow, HealthCheck.data_too_large])
@given(text=TEXTS, tags=TAGS, agent=AGENTS, importance=IMPORTANCES, scope=SCOPES)
def test_remember_either_stores_exactly_what_was_given_or_refuses_and_changes_nothing(
        runner: ServiceRunner, text: str, tags: list[str] | None, agent: str | None, importance: float,
        scope: str | None) -> None:
    before = runner.snapshot()
    try:
        result = runner.run(runner.service.remember(text, tags, agent, importance, scope=scope))
    except AppError as error:
        assert error.code != "error" and error.message
        assert runner.snapshot() == before
        return
    stored = runner.run(runner.service.get(result.memory_id))
    assert stored.text == text
    assert len(runner.snapshot()) == len(before) + 1


@settings(max_examples=80, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(value=st.text(max_size=80), limit=st.integers(-3, 300), offset=st.integers(-3, 10**6))
def test_reads_with_random_filters_return_a_subset_or_refuse(runner: ServiceRunner, value: str, limit: int,
                                                             offset: int) -> None:
    before = runner.snapshot()
    calls = [
        lambda: runner.service.list_facts(agent=value, limit=max(limit, 1)),
        lambda: runner.service.list_facts(tag=value, limit=limit, offset=offset),
        lambda: runner.service.list_memories(scope=value, category=value, limit=limit, offset=offset),
        lambda: runner.service.keyword_search(value, scope=None, limit=limit),
        lambda: runner.service.get(value),
        lambda: runner.service.forget(value),
    ]
    for call in calls:
        try:
            result = runner.run(call())
        except AppError as error:
            assert error.code != "error"
            continue
        if isinstance(result, list):
            assert len(result) <= max(limit, 1)
    after = runner.snapshot()
    assert after == before or (len(after) == len(before) - 1 and value in {row[0] for row in before})


WORDS = st.lists(st.sampled_from(["alpha", "beta", "gamma", "delta", "kiwi", "build", "cache", "部署", "🚀"]),
                 min_size=1, max_size=6).map(" ".join)


class MemoryModel(RuleBasedStateMachine):
    """remember / forget / list / dedupe against a dict of id -> (text, scope)."""

    memories = Bundle("memories")

    @initialize()
    def open_service(self) -> None:
        self._directory = tempfile.TemporaryDirectory()
        self.runner = ServiceRunner(Path(self._directory.name))
        self.model: dict[str, tuple[str, str]] = {}
        self.counter = 0

    def teardown(self) -> None:
        if hasattr(self, "runner"):
            self.runner.close()
            self._directory.cleanup()

    @rule(target=memories, words=WORDS, agent=st.sampled_from([None, "claude-code", "codex"]))
    def remember(self, words: str, agent: str | None) -> str:
        self.counter += 1
        text = f"{words} #{self.counter}"  # unique, so the model knows which memory a duplicate names
        result = self.runner.run(self.runner.service.remember(text, ["model"], agent))
        assert result.memory_id not in self.model
        self.model[result.memory_id] = (text, f"agent:{agent}" if agent else "global")
        return result.memory_id

    @rule(memory_id=consumes(memories))
    def forget(self, memory_id: str) -> None:
        self.runner.run(self.runner.service.forget(memory_id))
        del self.model[memory_id]

    @rule(memory_id=st.sampled_from(["deadbeef", "00000000", "manual-1-1"]))
    def forget_unknown(self, memory_id: str) -> None:
        if memory_id in self.model:
            return
        with pytest.raises(MemoryNotFound):
            self.runner.run(self.runner.service.forget(memory_id))

    @rule(memory_id=memories)
    def remembering_the_same_text_reports_the_duplicate(self, memory_id: str) -> None:
        text, scope = self.model[memory_id]
        check = self.runner.run(self.runner.service.check_duplicate(text))
        assert check.is_duplicate and memory_id in {s.memory_id for s in check.similar}
        agent = scope.removeprefix("agent:") if scope != "global" else None
        again = self.runner.run(self.runner.service.remember(text, ["model"], agent))
        # Several stored copies of this text may tie at score 1.0; any of them is the right answer.
        same_text = {mid for mid, (other, other_scope) in self.model.items() if (other, other_scope) == (text, scope)}
        assert again.duplicate is not None and again.duplicate.memory_id in same_text
        self.model[again.memory_id] = (text, scope)

    @rule(agent=st.sampled_from(["claude-code", "codex"]))
    def list_one_agent(self, agent: str) -> None:
        listed = self.runner.run(self.runner.service.list_facts(agent=agent, limit=200))
        expected = {i for i, (_, scope) in self.model.items() if scope == f"agent:{agent}"}
        assert {m.id for m in listed} == expected

    @invariant()
    def store_matches_the_model(self) -> None:
        if not hasattr(self, "runner"):
            return
        listed = self.runner.run(self.runner.service.list_memories(limit=200))
        assert {m.id: (m.text, m.scope) for m in listed} == self.model


MemoryModel.TestCase.settings = settings(max_examples=20, stateful_step_count=30, deadline=None, database=None,
                                         suppress_health_check=[HealthCheck.too_slow])
test_the_store_agrees_with_a_dict_model_over_random_operation_sequences = pytest.mark.slow(MemoryModel.TestCase)
