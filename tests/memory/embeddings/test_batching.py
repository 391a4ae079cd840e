"""MicroBatcher: concurrent requests become few model calls on one worker thread."""

from __future__ import annotations

import asyncio
import threading

import anyio
import numpy as np
import pytest

from app.memory.embeddings.base import EmbeddingError
from app.memory.embeddings.batching import MicroBatcher


class GatedModel:
    """Records every call; the first call can be held until the test releases it."""

    def __init__(self, *, hold_first: bool = False) -> None:
        self.calls: list[tuple[str, list[str]]] = []
        self.threads: set[int] = set()
        self.started = threading.Event()
        self.release = threading.Event()
        if not hold_first:
            self.release.set()
        self.fail_on: str | None = None

    def __call__(self, kind: str, texts: list[str]) -> np.ndarray:
        self.calls.append((kind, list(texts)))
        self.threads.add(threading.get_ident())
        self.started.set()
        if not self.release.wait(10):
            raise RuntimeError("test never released the model")
        if self.fail_on is not None and self.fail_on in texts:
            raise RuntimeError("model exploded")
        return np.array([[float(len(t)), 1.0 if kind == "query" else 0.0] for t in texts], dtype=np.float32)


async def wait_until(condition: threading.Event) -> None:
    """Wait (bounded) for an event the worker thread sets."""
    assert await anyio.to_thread.run_sync(condition.wait, 10), "the model was never called"


async def test_requests_queued_behind_a_running_batch_are_merged_into_one_call() -> None:
    model = GatedModel(hold_first=True)
    batcher = MicroBatcher(model, max_batch=64)
    first = asyncio.create_task(batcher.submit("document", ["x"]))
    await wait_until(model.started)
    rest = [asyncio.create_task(batcher.submit("document", ["y" * i])) for i in range(1, 31)]
    # call_soon runs after the tasks' first steps (FIFO), i.e. once all 30 have enqueued
    asyncio.get_running_loop().call_soon(model.release.set)
    results = await asyncio.gather(first, *rest)
    assert len(model.calls) == 2
    assert len(model.calls[1][1]) == 30
    for i, rows in enumerate(results[1:], start=1):
        assert rows.shape == (1, 2) and rows[0, 0] == i  # each caller gets its own row back
    assert batcher.stats.largest_batch == 30
    await batcher.close()


async def test_queries_and_documents_never_share_a_model_call() -> None:
    model = GatedModel(hold_first=True)
    batcher = MicroBatcher(model, max_batch=64)
    first = asyncio.create_task(batcher.submit("document", ["warm"]))
    await wait_until(model.started)
    mixed = [asyncio.create_task(batcher.submit("query" if i % 2 else "document", [f"t{i}"])) for i in range(10)]
    asyncio.get_running_loop().call_soon(model.release.set)
    results = await asyncio.gather(first, *mixed)
    for kind, texts in model.calls[1:]:
        expected = "query" if kind == "query" else "document"
        assert all(("query" if int(text[1:]) % 2 else "document") == expected for text in texts)
    assert sorted(kind for kind, _ in model.calls[1:]) == ["document", "query"]
    assert [rows[0, 1] for rows in results[1:]] == [float(i % 2) for i in range(10)]
    await batcher.close()


async def test_a_large_request_is_split_into_max_batch_chunks_and_reassembled_in_order() -> None:
    model = GatedModel()
    batcher = MicroBatcher(model, max_batch=4)
    texts = ["a" * i for i in range(1, 11)]
    rows = await batcher.submit("document", texts)
    assert [len(batch) for _, batch in model.calls] == [4, 4, 2]
    assert rows[:, 0].tolist() == [float(i) for i in range(1, 11)]
    await batcher.close()


async def test_all_model_calls_run_on_one_thread_that_is_not_the_event_loop() -> None:
    model = GatedModel()
    batcher = MicroBatcher(model, max_batch=2)
    await asyncio.gather(*(batcher.submit("document", [str(i)] * 3) for i in range(8)))
    assert len(model.threads) == 1
    assert threading.get_ident() not in model.threads
    await batcher.close()


async def test_a_failing_batch_fails_its_callers_and_the_next_batch_still_works() -> None:
    model = GatedModel()
    model.fail_on = "boom"
    batcher = MicroBatcher(model, max_batch=8)
    with pytest.raises(EmbeddingError, match="model exploded"):
        await batcher.submit("document", ["boom"])
    rows = await batcher.submit("document", ["fine"])
    assert rows.shape == (1, 2)
    await batcher.close()


async def test_a_cancelled_caller_does_not_disturb_the_others() -> None:
    model = GatedModel(hold_first=True)
    batcher = MicroBatcher(model, max_batch=8)
    first = asyncio.create_task(batcher.submit("document", ["first"]))
    await wait_until(model.started)
    doomed = asyncio.create_task(batcher.submit("document", ["doomed"]))
    kept = asyncio.create_task(batcher.submit("document", ["kept"]))
    loop = asyncio.get_running_loop()
    loop.call_soon(doomed.cancel)  # after both tasks have queued their texts (FIFO)
    loop.call_soon(model.release.set)
    assert (await kept)[0, 0] == 4.0
    await first
    assert doomed.cancelled()
    assert ["doomed"] not in [texts for _, texts in model.calls]
    assert model.calls[-1][1] == ["kept"]
    await batcher.close()


async def test_a_closed_batcher_refuses_new_work() -> None:
    batcher = MicroBatcher(GatedModel(), max_batch=8)
    await batcher.close()
    with pytest.raises(EmbeddingError, match="closed"):
        await batcher.submit("document", ["late"])
