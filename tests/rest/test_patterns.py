"""Each schema pattern matches exactly what its domain check accepts, read as JSON Schema reads it.

The reader is jsonschema-rs (ECMA-262 patterns), the validator schemathesis judges requests with; the
strings come from an alphabet heavy in what the checks care about: Unicode whitespace that ``strip()``
removes, control characters, brackets, commas, slashes and the letters of ``TASK-``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import jsonschema_rs  # installed with schemathesis
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.errors import AppError
from app.kanban import validation as kanban_checks
from app.kanban.job_command import check_args
from app.memory import validation as memory_checks
from app.memory.scopes import check_scope
from app.memory.store.filters import literal
from app.rest import patterns
from app.settings import Settings

SETTINGS = Settings(db_path=Path("unused"), embedding_provider="hash", max_tags=3, max_tag_chars=5)
SPECIAL = (
    patterns.WHITESPACE + patterns.MEMORY_CONTROLS + "[]/,:-_.@ ſKk0123456789"
    + "TASKtask" + "globalagentprojectusercustom" + "é部😀\ufeff"
)
TEXT = st.text(st.one_of(st.sampled_from(SPECIAL), st.characters(exclude_categories=["Cs"])), max_size=24)


def accepts(check: Callable[[str], object]) -> Callable[[str], bool]:
    def run(value: str) -> bool:
        try:
            check(value)
        except AppError:
            return False
        return True

    return run


def matches(pattern: str) -> Callable[[str], bool]:
    validator = jsonschema_rs.validator_for({"type": "string", "pattern": pattern})
    return validator.is_valid


def focused(alphabet: str) -> st.SearchStrategy[str]:
    """Short strings of a few characters that decide the check, mixed with arbitrary text."""
    return st.one_of(TEXT, st.text(st.sampled_from(alphabet), max_size=12))


def task_ids() -> st.SearchStrategy[str]:
    """Near-misses and hits of TASK-00001[-title], with whitespace and odd letters around them."""
    pad = st.text(st.sampled_from(patterns.WHITESPACE + "x/"), max_size=2)
    head = st.sampled_from(["TASK-", "task-", "TaſK-", "TASK", "TASK_", "TAS-", "ＴASK-"])
    digits = st.one_of(st.text("0123456789", min_size=4, max_size=10), st.text("0123456789١", min_size=5, max_size=6))
    suffix = st.one_of(st.just(""), st.builds(lambda s: "-" + s, TEXT), TEXT)
    return st.builds(lambda a, b, c, d, e: a + b + c + d + e, pad, head, digits, suffix, pad)


def scopes() -> st.SearchStrategy[str]:
    family = st.sampled_from(["global", "agent:", "project:", "user:", "custom:", "team:", "agent", ""])
    name = st.text("abcXYZ09_.@/-: é", max_size=8)
    pad = st.text(patterns.WHITESPACE, max_size=2)
    return st.builds(lambda p, f, n, q: p + f + n + q, pad, family, name, pad)


def categories() -> st.SearchStrategy[str]:
    part = st.text("ab , \t\x01é", max_size=7)
    return st.lists(part, max_size=6).map(",".join)


def assert_agrees(pattern: str, check: Callable[[str], bool], value: str) -> None:
    assert matches(pattern)(value) == check(value), repr(value)


CASES: dict[str, tuple[str, Callable[[str], bool], st.SearchStrategy[str]]] = {
    "memory text": (patterns.MEMORY_TEXT_PATTERN, accepts(lambda s: memory_checks.check_text(s, SETTINGS)), TEXT),
    "memory id": (patterns.MEMORY_ID_PATTERN, accepts(memory_checks.check_memory_id), focused("aZ9_.:-\n é")),
    "task id": (patterns.TASK_ID_PATTERN, accepts(kanban_checks.normalize_task_id), st.one_of(task_ids(), TEXT)),
    "task id in a path": (
        patterns.TASK_ID_PATH_PATTERN,
        lambda s: "/" not in s and accepts(kanban_checks.normalize_task_id)(s),
        st.one_of(task_ids(), TEXT),
    ),
    "new task id": (
        patterns.NEW_TASK_ID_PATTERN,
        lambda s: s == "" or accepts(kanban_checks.normalize_task_id)(s),
        st.one_of(task_ids(), TEXT),
    ),
    "title": (patterns.TITLE_PATTERN, accepts(kanban_checks.check_title), focused("[]a \n\r\x00\u3000")),
    "name": (patterns.NAME_PATTERN, accepts(lambda s: kanban_checks.check_name(s, "name")), focused("a \n\r\x00\x85")),
    "optional name": (
        patterns.OPTIONAL_NAME_PATTERN,
        accepts(lambda s: kanban_checks.check_name(s, "name", allow_empty=True)),
        focused("a \n\r\x00\x85"),
    ),
    "note": (patterns.NOTE_PATTERN, accepts(kanban_checks.check_note), focused("a \n\x00\x1c")),
    "card tag": (
        patterns.CARD_TAG_PATTERN,
        accepts(lambda s: kanban_checks.check_tags([s])),
        focused("a \n\r\x0b"),
    ),
    "description": (patterns.NO_NUL_PATTERN, accepts(kanban_checks.check_description), focused("a\x00")),
    "job argument": (patterns.NO_NUL_PATTERN, accepts(lambda s: check_args([s])), focused("a\x00")),
    "filter value": (patterns.FILTER_VALUE_PATTERN, accepts(literal), TEXT),
}


@pytest.mark.parametrize("name", CASES)
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_a_pattern_matches_exactly_what_its_check_accepts(name: str, data: st.DataObject) -> None:
    pattern, check, strings = CASES[name]
    assert_agrees(pattern, check, data.draw(strings))


# The schema bounds these lengths with maxLength, next to the pattern (REST refuses longer values itself).
MAX_LENGTHS = {"title": 300, "name": 100, "optional name": 100, "card tag": 64}


@pytest.mark.parametrize("name", CASES)
@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_what_a_pattern_generates_its_check_accepts(name: str, data: st.DataObject) -> None:
    pattern, check, _ = CASES[name]
    longest = MAX_LENGTHS.get(name, 4096)
    value = data.draw(st.from_regex(pattern).filter(lambda s: len(s) <= longest and matches(pattern)(s)))
    assert check(value), repr(value)


@settings(max_examples=500, deadline=None)
@given(scopes())
def test_a_scope_the_pattern_matches_is_accepted_and_an_ascii_scope_it_refuses_is_refused(value: str) -> None:
    accepted = accepts(check_scope)(value)
    if matches(patterns.SCOPE_PATTERN)(value):
        assert accepted, repr(value)
    elif value.isascii():
        assert not accepted, repr(value)


@settings(max_examples=500, deadline=None)
@given(categories())
def test_the_category_pattern_follows_the_tag_limits_from_settings(value: str) -> None:
    pattern = patterns.category_pattern(SETTINGS.max_tags, SETTINGS.max_tag_chars)
    parts = [part.strip() for part in value.split(",") if part.strip()]
    check = accepts(lambda s: memory_checks.check_tags(memory_checks.split_category(s), SETTINGS))
    if len(set(parts)) == len(parts):  # the service forgives repeated tags; the pattern counts every one
        assert_agrees(pattern, check, value)
    elif matches(pattern)(value):
        assert check(value), repr(value)


def test_the_category_pattern_allows_no_tag_at_all_when_the_limit_is_zero() -> None:
    pattern = patterns.category_pattern(0, 1)
    assert matches(pattern)(" , ") and not matches(pattern)("a")
    assert matches(patterns.category_pattern(2, 1))("a, b") and not matches(patterns.category_pattern(2, 1))("ab")
