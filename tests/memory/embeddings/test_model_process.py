"""Local models in a child process: same vectors, a crash or hang is an error, then a new child."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import numpy as np
import psutil
import pytest

from app.memory.embeddings.base import EmbeddingError
from app.memory.embeddings.local_use import UseEmbedder
from tests.memory.embeddings.process_models import CRASH, FAIL, HANG, ScriptedModel

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def _child_finds_the_tests(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    yield


@pytest.fixture
async def scripted() -> AsyncIterator[ScriptedModel]:
    embedder = ScriptedModel(in_process=False)
    await embedder.load()
    yield embedder
    await embedder.close()


def _gone(pid: int) -> bool:
    """The process exited within 10 s (a zombie nobody reaped counts: it holds no memory)."""
    try:
        psutil.Process(pid).wait(10)
    except psutil.NoSuchProcess:
        return True
    except psutil.TimeoutExpired:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    return True


async def test_the_model_runs_in_a_child_and_gives_the_in_process_vectors(scripted: ScriptedModel) -> None:
    inline = ScriptedModel()
    texts = [f"fact {i}: the deploy listens on 3002" for i in range(40)]  # three batches of <= 16
    try:
        expected = await inline.embed_documents(texts)
        got = await scripted.embed_documents(texts)
    finally:
        await inline.close()
    assert scripted.process_pid not in (None, os.getpid()) and inline.process_pid is None
    np.testing.assert_allclose(got, expected, atol=1e-6)  # the child's stdout prints did not corrupt them
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)


async def test_a_child_that_dies_mid_batch_fails_that_batch_and_the_next_request_gets_a_new_child(
    scripted: ScriptedModel,
) -> None:
    first = scripted.process_pid
    assert first is not None
    with pytest.raises(EmbeddingError, match=r"exited \(code 7\).*restarts on the next request"):
        await scripted.embed_documents(["keep me", CRASH])
    (vector,) = await scripted.embed_documents(["keep me"])
    assert scripted.process_pid not in (None, first) and vector.shape == (32,)


async def test_a_child_killed_while_idle_is_replaced_without_failing_the_request(scripted: ScriptedModel) -> None:
    first = scripted.process_pid
    assert first is not None
    psutil.Process(first).kill()
    assert _gone(first)
    vector = await scripted.embed_query("after the kill")
    assert scripted.process_pid not in (None, first) and vector.shape == (32,)


async def test_a_hung_child_is_stopped_after_the_reply_timeout(
    scripted: ScriptedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = scripted._model
    monkeypatch.setattr(model, "reply_timeout_s", 0.5)
    first = scripted.process_pid
    assert first is not None
    with pytest.raises(EmbeddingError, match=r"did not embed 1 texts within 0.5 s.*stopped"):
        await scripted.embed_documents([HANG])
    assert _gone(first)
    (vector,) = await scripted.embed_documents(["after the hang"])
    assert vector.shape == (32,)


async def test_a_model_error_fails_its_batch_and_the_child_carries_on(scripted: ScriptedModel) -> None:
    first = scripted.process_pid
    with pytest.raises(EmbeddingError, match="scripted \\(scripted-v1\\) failed: ValueError: the tokenizer rejected"):
        await scripted.embed_documents([FAIL])
    await scripted.embed_documents(["fine"])
    assert scripted.process_pid == first


async def test_a_model_that_cannot_load_reports_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCRIPTED_MODEL_BROKEN", "1")
    embedder = ScriptedModel(in_process=False)
    try:
        with pytest.raises(EmbeddingError, match="could not load ScriptedModel: RuntimeError: the weights file is"):
            await embedder.load()
        assert not embedder.loaded
    finally:
        await embedder.close()


async def test_closing_the_embedder_ends_its_child(monkeypatch: pytest.MonkeyPatch) -> None:
    embedder = ScriptedModel(in_process=False)
    await embedder.load()
    pid = embedder.process_pid
    assert pid is not None and psutil.pid_exists(pid)
    await embedder.close()
    assert _gone(pid) and embedder.process_pid is None


def test_a_server_killed_outright_takes_its_model_child_along() -> None:
    script = textwrap.dedent("""
        import asyncio, os, sys
        from tests.memory.embeddings.process_models import ScriptedModel
        embedder = ScriptedModel(in_process=False)
        asyncio.run(embedder.load())
        print(embedder.process_pid, flush=True)
        os.kill(os.getpid(), 9)
    """)
    parent = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60,
                            check=False)
    assert parent.returncode == -9, parent.stderr
    child = int(parent.stdout.strip())
    assert _gone(child)  # its stdin closed with the parent: no orphan keeps 160 MB


async def test_the_default_model_gives_the_same_vectors_in_a_child() -> None:
    inline, child = UseEmbedder(), UseEmbedder(in_process=False)
    texts = ["The deploy listens on port 3002.", "部署监听 3002 端口。"]
    try:
        expected = await inline.embed_documents(texts)
        got = await child.embed_documents(texts)
        assert child.process_pid is not None
    finally:
        await asyncio.gather(inline.close(), child.close())
    np.testing.assert_allclose(got, expected, atol=1e-6)

