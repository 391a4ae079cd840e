"""Which commit failures are retried: Lance's conflicts (local or object storage), never our own errors."""

from __future__ import annotations

import pytest

from app.memory.errors import StoreBusy
from app.memory.store import commits
from app.memory.store.locks import ProcessLock


@pytest.mark.parametrize("message", [
    "Retryable commit conflict for version 12: This Update transaction was preempted by concurrent transaction "
    "Rewrite at version 12. Please retry.",
    "Commit conflict for version 7: concurrent Delete",
    "Too many concurrent writers. Failed to commit after 20 retries.",
    "Request precondition failure for path s3://bucket/t/memories.lance/_versions/x.manifest",
])
def test_lance_commit_conflicts_are_retried(message: str) -> None:
    assert commits.is_retryable(RuntimeError(message))


@pytest.mark.parametrize("error", [
    OSError("Generic S3 error: Error after 10 retries in 2.1s, max_retries:10: connection refused"),
    StoreBusy("the memory store is busy (write lock held in this process); retry"),
    ValueError("Schema error: No field named nope"),
])
def test_other_failures_are_not_retried(error: Exception) -> None:
    assert not commits.is_retryable(error)


def test_a_conflicting_commit_is_run_again_until_it_lands() -> None:
    attempts: list[int] = []

    def commit() -> str:
        attempts.append(len(attempts))
        if len(attempts) < 3:
            raise RuntimeError("Retryable commit conflict for version 3: preempted")
        return "landed"

    assert commits.locked_with_retry(ProcessLock(1.0), commit) == "landed"
    assert len(attempts) == 3


def test_a_commit_that_keeps_conflicting_gives_up_after_its_attempts() -> None:
    attempts: list[int] = []

    def conflict() -> str:
        attempts.append(1)
        raise RuntimeError("Retryable commit conflict for version 3: preempted")

    with pytest.raises(RuntimeError, match="Retryable commit conflict"):
        commits.locked_with_retry(ProcessLock(1.0), conflict)
    assert len(attempts) == commits.MAX_ATTEMPTS
