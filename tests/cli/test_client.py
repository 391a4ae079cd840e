"""The REST client commands against a real server: output, auth and the exit-code contract."""

from __future__ import annotations

import io
import json
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from app.cli import main
from app.cli.output import one_line
from tests.conftest import SettingsFactory
from tests.support.server import LiveServer, free_port, run_server

TOKEN = "cli-test-token-0123"


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run ``memory-mcp ARGV`` in-process; argparse's SystemExit becomes the exit code."""
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.fixture
def server(live_server: LiveServer, monkeypatch: pytest.MonkeyPatch) -> LiveServer:
    monkeypatch.setenv("MEMORY_MCP_URL", live_server.url)
    # Tables as on a wide terminal, whatever the test worker's stdout is: what they hold is under test here.
    monkeypatch.setenv("COLUMNS", "160")
    return live_server


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections (kernel backlog) and never answers: a hung server."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield int(sock.getsockname()[1])


def test_remember_then_recall_finds_the_memory_with_its_score(
    server: LiveServer, capsys: pytest.CaptureFixture[str]
) -> None:
    created = run_json(capsys, "remember", "memory-mcp timestamp 必須用毫秒，與 OpenClaw 格式一致")
    assert created["ok"] is True and created["id"]

    hits = run_json(capsys, "recall", "timestamp 必須用毫秒", "--top-k", "3")

    assert hits[0]["id"] == created["id"]
    assert hits[0]["text"] == "memory-mcp timestamp 必須用毫秒，與 OpenClaw 格式一致"
    assert 0 < hits[0]["score"] <= 1.0


def test_remember_with_agent_tags_and_importance_stores_them(
    server: LiveServer, capsys: pytest.CaptureFixture[str]
) -> None:
    created = run_json(
        capsys, "remember", "build with make test", "--agent", "claude-code", "--tags", "build, ci,build",
        "--importance", "0.9",
    )

    listed = run_json(capsys, "list", "--agent", "claude-code")

    assert [m["id"] for m in listed] == [created["id"]]
    assert listed[0]["scope"] == "agent:claude-code"
    assert listed[0]["category"] == "other" and listed[0]["tags"] == ["build", "ci"]
    assert listed[0]["importance"] == pytest.approx(0.9)


def test_list_is_newest_first_and_pages_with_limit_and_offset(
    server: LiveServer, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = [run_json(capsys, "remember", f"paging note number {i}")["id"] for i in range(3)]

    first = run_json(capsys, "list", "--limit", "2")
    rest = run_json(capsys, "list", "--limit", "2", "--offset", "2")

    assert [m["id"] for m in first + rest] == list(reversed(ids))


def test_list_filters_by_scope_and_category(server: LiveServer, capsys: pytest.CaptureFixture[str]) -> None:
    tagged = run_json(capsys, "remember", "tagged decision note", "--tags", "decision", "--scope", "global")["id"]
    run_json(capsys, "remember", "untagged note", "--agent", "antigravity")

    assert [m["id"] for m in run_json(capsys, "list", "--category", "decision")] == [tagged]
    assert [m["scope"] for m in run_json(capsys, "list", "--scope", "agent:antigravity")] == ["agent:antigravity"]


def test_forget_deletes_and_forgetting_again_exits_1_with_not_found(
    server: LiveServer, capsys: pytest.CaptureFixture[str]
) -> None:
    memory_id = run_json(capsys, "remember", "short-lived note")["id"]

    code, out, _ = run_cli(capsys, "forget", memory_id)
    assert (code, out.strip()) == (0, f"forgot {memory_id}")
    assert run_json(capsys, "list") == []

    code, out, err = run_cli(capsys, "forget", memory_id)
    assert code == 1 and out == ""
    assert memory_id in err


def test_stats_reports_counts_per_scope(server: LiveServer, capsys: pytest.CaptureFixture[str]) -> None:
    run_json(capsys, "remember", "one global note")
    run_json(capsys, "remember", "one agent note", "--agent", "claude-code")

    stats = run_json(capsys, "stats")
    code, out, _ = run_cli(capsys, "stats")

    assert stats["total"] == 2
    assert stats["scopes"] == {"global": 1, "agent:claude-code": 1}
    assert code == 0 and "agent:claude-code" in out and "total: 2" in out
    assert "embedding: provider=hash, model=hash-bow-v1, dimension=256" in out


def test_human_output_is_a_table_with_id_scope_and_text(server: LiveServer, capsys: pytest.CaptureFixture[str]) -> None:
    memory_id = run_json(capsys, "remember", "tables are for people", "--agent", "claude-code")["id"]

    code, out, _ = run_cli(capsys, "recall", "tables are for people")
    lines = out.splitlines()

    assert code == 0
    assert lines[0].split() == ["SCORE", "SIMILARITY", "ID", "SCOPE", "TEXT"]
    assert lines[1].split()[:4] == ["1.000", "1.000", memory_id, "agent:claude-code"]
    assert "tables are for people" in lines[1]
    code, out, _ = run_cli(capsys, "list")
    assert out.splitlines()[0].split() == ["ID", "TIME", "SCOPE", "IMP", "TAGS", "TEXT"]


def test_recall_shows_a_text_stored_twice_once_and_names_the_copy(
    server: LiveServer, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = (run_json(capsys, "remember", "the cache is warmed at boot")["id"] for _ in range(2))

    hits = run_json(capsys, "recall", "the cache is warmed at boot")
    code, out, _ = run_cli(capsys, "recall", "the cache is warmed at boot")

    assert len(hits) == 1 and sorted([hits[0]["id"], *hits[0]["duplicate_ids"]]) == sorted([first, second])
    assert hits[0]["similarity"] == pytest.approx(1.0, abs=1e-5)
    shown, copy = hits[0]["id"], hits[0]["duplicate_ids"][0]
    assert code == 0 and len(out.splitlines()) == 3
    assert out.splitlines()[2] == f"{shown} also stands for {copy} (same text)"


def test_recall_leaves_out_a_memory_that_a_newer_one_replaced(
    server: LiveServer, capsys: pytest.CaptureFixture[str]
) -> None:
    old = run_json(capsys, "remember", "the cache is warmed at boot")["id"]
    replacement = {"text": "the cache is warmed on the first request", "supersedes": old}
    new = httpx.post(f"{server.url}/api/lancedb/memories", json=replacement).json()["id"]

    hits = run_json(capsys, "recall", "the cache is warmed", "--top-k", "5")
    found = run_json(capsys, "recall", "cache", "--keyword")

    assert [hit["id"] for hit in hits] == [new] and [hit["id"] for hit in found] == [new]


def test_keyword_recall_has_no_similarity_to_show(server: LiveServer, capsys: pytest.CaptureFixture[str]) -> None:
    run_json(capsys, "remember", "the deploy key rotates monthly")

    code, out, _ = run_cli(capsys, "recall", "deploy key", "--keyword")

    assert code == 0 and out.splitlines()[1].split()[:2] == ["1.000", "-"]


def test_a_memory_cannot_reorder_or_break_lines_of_the_table(
    server: LiveServer, capsys: pytest.CaptureFixture[str]
) -> None:
    run_json(capsys, "remember", "evil \u202e reversed\nsecond\tline\u200b end")

    code, out, _ = run_cli(capsys, "list")

    assert code == 0 and len(out.splitlines()) == 2
    assert not any(ch in out for ch in "\u202e\u200b\t")
    assert "evil reversed second line end" in out


def test_terminal_escapes_from_rows_other_writers_stored_are_stripped() -> None:
    # The server refuses control characters, but OpenClaw writes the same table directly.
    assert one_line("a\x1b[2J\x1b]0;title\x07b\x9bc\r\nd") == "a [2J ]0;title b c d"


def test_remember_dash_reads_the_text_from_stdin(
    server: LiveServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("piped from a script\n"))

    memory_id = run_json(capsys, "remember", "-")["id"]

    assert [m["text"].strip() for m in run_json(capsys, "list") if m["id"] == memory_id] == ["piped from a script"]


def test_a_server_refusal_exits_1_and_shows_the_detail_and_code(
    server: LiveServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(capsys, "recall", "")

    assert code == 1 and out == ""
    assert "invalid_input" in err and "HTTP 422" in err


def test_the_token_is_sent_as_a_bearer_header(
    make_settings: SettingsFactory, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with run_server(make_settings(token=SecretStr(TOKEN))) as live:
        monkeypatch.setenv("MEMORY_MCP_URL", live.url)
        code, _, err = run_cli(capsys, "list")
        assert code == 1 and "401" in err and "MEMORY_MCP_TOKEN" in err

        monkeypatch.setenv("MEMORY_MCP_TOKEN", TOKEN)
        assert run_json(capsys, "list") == []


def test_an_unreachable_server_exits_3(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORY_MCP_URL", f"http://127.0.0.1:{free_port()}")

    for argv in (["stats"], ["list"], ["recall", "anything"], ["remember", "x"], ["forget", "abc"]):
        code, out, err = run_cli(capsys, *argv)
        assert (code, out) == (3, ""), argv
        assert "cannot reach" in err


def test_a_server_that_never_answers_exits_3_after_the_timeout(
    silent_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(capsys, "stats", "--url", f"http://127.0.0.1:{silent_port}", "--timeout", "0.3")

    assert (code, out) == (3, "")
    assert "did not answer in time" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["remember", "x", "--importance", "1.5"],
        ["remember", "x", "--agent", "a", "--scope", "global"],
        ["recall", "x", "--top-k", "0"],
        ["list", "--limit", "many"],
        ["forget"],
        ["no-such-command"],
    ],
)
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, *argv)

    assert (code, out) == (2, "")


def test_a_malformed_server_url_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "stats", "--url", "localhost:3002")

    assert code == 2 and "MEMORY_MCP_URL" in err


@pytest.mark.parametrize("command", ["remember", "recall", "forget", "list", "stats", "hook", "config"])
def test_every_command_has_help_that_exits_0(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, command, "--help")

    assert code == 0 and f"memory-mcp {command}" in out


def test_a_scope_without_a_family_is_refused_with_the_accepted_forms_and_nothing_is_stored(
    server: LiveServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(capsys, "remember", "a project decision", "--scope", "myproject")
    assert code == 1 and "invalid_scope" in err and "'project:myproject'" in err
    assert run_json(capsys, "list") == []
    stored = run_json(capsys, "remember", "a project decision", "--scope", "project:myproject")
    assert [m["scope"] for m in run_json(capsys, "list")] == ["project:myproject"] and stored["id"]
