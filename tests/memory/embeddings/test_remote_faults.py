"""Remote providers facing a misbehaving server: clear errors, bounded time, bounded retries."""

from __future__ import annotations

import logging
import time

import anyio
import pytest

from app.memory.embeddings.base import EmbeddingError
from app.memory.embeddings.breaker import CircuitBreaker
from app.memory.embeddings.remote import PROBE_TEXT, RemoteEmbedder, parse_retry_after
from tests.memory.embeddings.fake_server import FakeEmbeddingServer, refused_url, silent_server
from tests.memory.embeddings.remote_support import API_KEY, RemoteFactory


async def embed_failure(embedder: RemoteEmbedder, bound_s: float = 5.0) -> tuple[EmbeddingError, float]:
    """Embed one text, expect an EmbeddingError within ``bound_s``; return it and the time taken."""
    started = time.monotonic()
    with anyio.fail_after(bound_s), pytest.raises(EmbeddingError) as caught:
        await embedder.embed_documents(["a memory"])
    error = caught.value
    assert error.code == "embedding_unavailable"
    assert f"embedding provider {embedder.name} (model {embedder.model})" in error.message
    assert API_KEY not in error.message
    return error, time.monotonic() - started


async def test_a_hanging_server_fails_within_the_read_timeout(
    make_remote: RemoteFactory, fake: FakeEmbeddingServer
) -> None:
    embedder = await make_remote("jina", embedding_max_retries=0)
    fake.set("hang")
    error, _ = await embed_failure(embedder, bound_s=4)
    assert "no response in time" in error.message and fake.hits == 1


async def test_a_server_that_accepts_and_never_answers_fails_at_the_deadline(make_remote: RemoteFactory) -> None:
    with silent_server() as url:
        embedder = await make_remote("openai", embedding_base_url=url, embedding_timeout_s=10.0,
                                     embedding_max_retries=2, embedding_deadline_s=1.0)
        error, elapsed = await embed_failure(embedder, bound_s=4)
    assert "no complete answer within the 1s deadline" in error.message
    assert 1.0 <= elapsed < 3.0


async def test_timeouts_are_retried_a_bounded_number_of_times(
    make_remote: RemoteFactory, fake: FakeEmbeddingServer
) -> None:
    embedder = await make_remote("openai", embedding_max_retries=1, embedding_timeout_s=0.5)
    fake.set("hang")
    error, _ = await embed_failure(embedder, bound_s=4)
    assert "gave up after 2 attempts" in error.message and fake.hits == 2


async def test_a_trickling_answer_is_cut_off_by_the_total_deadline(
    make_remote: RemoteFactory, fake: FakeEmbeddingServer
) -> None:
    embedder = await make_remote("jina")
    embedder.deadline_s = 1.0  # bytes arrive every 0.2 s, so only the total deadline can fire
    fake.set("drip")
    error, _ = await embed_failure(embedder, bound_s=4)
    assert "1s deadline" in error.message


async def test_a_server_error_is_retried_then_reported(make_remote: RemoteFactory, fake: FakeEmbeddingServer) -> None:
    embedder = await make_remote("jina", embedding_max_retries=2)
    fake.set("status:500")
    error, _ = await embed_failure(embedder)
    assert "HTTP 500" in error.message and "gave up after 3 attempts" in error.message
    assert fake.hits == 3


async def test_a_transient_server_error_is_absorbed_by_a_retry(
    make_remote: RemoteFactory, fake: FakeEmbeddingServer
) -> None:
    embedder = await make_remote("openai")
    fake.set("ok", "status:503")
    assert (await embedder.embed_documents(["x"])).shape == (1, 8)
    assert fake.hits == 2


async def test_a_429_with_retry_after_waits_that_long_then_succeeds(
    make_remote: RemoteFactory, fake: FakeEmbeddingServer
) -> None:
    embedder = await make_remote("jina")
    fake.set("ok", "status:429:1")
    started = time.monotonic()
    with anyio.fail_after(5):
        vectors = await embedder.embed_documents(["x"])
    assert vectors.shape == (1, 8) and fake.hits == 2
    assert time.monotonic() - started >= 0.9  # Retry-After: 1 was honoured


async def test_a_429_forever_gives_up_after_the_retry_budget(
    make_remote: RemoteFactory, fake: FakeEmbeddingServer
) -> None:
    embedder = await make_remote("jina", embedding_max_retries=2)
    fake.set("status:429")
    error, _ = await embed_failure(embedder)
    assert "HTTP 429" in error.message and fake.hits == 3


async def test_a_retry_after_beyond_the_deadline_fails_at_once(
    make_remote: RemoteFactory, fake: FakeEmbeddingServer
) -> None:
    embedder = await make_remote("jina")
    fake.set("status:429:120")
    error, elapsed = await embed_failure(embedder)
    assert "does not fit" in error.message and fake.hits == 1
    assert error.retry_after_s == 120
    assert elapsed < 2


@pytest.mark.parametrize("status", [400, 401, 404])
async def test_client_errors_are_not_retried(
    make_remote: RemoteFactory, fake: FakeEmbeddingServer, status: int
) -> None:
    embedder = await make_remote("openai")
    fake.set(f"status:{status}")
    error, _ = await embed_failure(embedder)
    assert f"HTTP {status}" in error.message and error.reason == "rejected"
    assert fake.hits == 1


async def test_a_server_echoing_the_key_does_not_leak_it_into_errors_or_logs(
    make_remote: RemoteFactory, fake: FakeEmbeddingServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    embedder = await make_remote("jina", embedding_max_retries=1, embedding_breaker_failures=5)
    fake.set("status:500", "echo_auth_401")
    error, _ = await embed_failure(embedder)
    assert "check the API key" in error.message and "***" in error.message
    await embed_failure(embedder)  # 500 then retry: logged warnings
    assert "attempt 1 failed" in caplog.text
    assert API_KEY not in caplog.text


@pytest.mark.parametrize(
    ("mode", "fragment"),
    [
        ("wrong_dim", "7-dimensional vectors, expected 8"),
        ("nan", "NaN or infinity"),
        ("inf", "NaN or infinity"),
        ("zero", "zero vector"),
        ("wrong_count", "returned 0 embeddings for 1 texts"),
        ("not_json", "not JSON"),
        ("no_data", "no 'data' list"),
    ],
)
async def test_unusable_answers_are_rejected_without_retrying(
    make_remote: RemoteFactory, fake: FakeEmbeddingServer, mode: str, fragment: str
) -> None:
    embedder = await make_remote("jina")
    fake.set(mode)
    with anyio.fail_after(5), pytest.raises(EmbeddingError, match=fragment) as caught:
        await embedder.embed_documents(["a memory"])
    assert caught.value.reason == "invalid"
    assert fake.hits == 1


async def test_connection_refused_fails_fast_after_bounded_retries(make_remote: RemoteFactory) -> None:
    embedder = await make_remote("openai", embedding_base_url=refused_url(), embedding_max_retries=2)
    error, elapsed = await embed_failure(embedder, bound_s=4)
    assert "connection failed" in error.message and "gave up after 3 attempts" in error.message
    assert elapsed < 3


async def test_a_failed_dimension_probe_fails_load_clearly(
    make_remote: RemoteFactory, fake: FakeEmbeddingServer
) -> None:
    fake.set("status:401")
    embedder = await make_remote("openai", embedding_dimensions=None, load=False)
    with anyio.fail_after(5), pytest.raises(EmbeddingError, match="HTTP 401"):
        await embedder.load()
    with pytest.raises(EmbeddingError, match="dimension unknown"):
        _ = embedder.dimension


async def test_an_open_breaker_fails_every_call_at_once_and_a_background_probe_closes_it(
    make_remote: RemoteFactory, fake: FakeEmbeddingServer
) -> None:
    embedder = await make_remote("jina", embedding_max_retries=0)
    embedder.breaker = CircuitBreaker(threshold=5, cooldown_s=0.2)
    fake.set("status:500")
    for _ in range(5):
        await embed_failure(embedder)
    assert fake.hits == 5 and not embedder.ready
    fake.set("ok")
    error, elapsed = await embed_failure(embedder)
    assert "failing fast" in error.message and error.retry_after_s is not None and error.retry_after_s <= 0.2
    assert elapsed < 0.5
    with anyio.fail_after(5):
        await embedder.until_available()  # the background probe: nobody's call sent it
    assert embedder.ready and fake.hits == 6
    assert fake.state.requests[-1].body["input"] == [PROBE_TEXT]
    assert (await embedder.embed_documents(["closed again"])).shape == (1, 8)


async def test_while_a_probe_hangs_calls_still_fail_at_once(
    make_remote: RemoteFactory, fake: FakeEmbeddingServer
) -> None:
    embedder = await make_remote("openai", embedding_max_retries=0, embedding_timeout_s=0.5,
                                 embedding_deadline_s=0.5)
    embedder.breaker = CircuitBreaker(threshold=1, cooldown_s=0.2)
    fake.set("hang")
    await embed_failure(embedder)  # opens the breaker after the 0.5 s deadline
    assert await anyio.to_thread.run_sync(fake.wait_for_hits, 2)  # the background probe is hanging now
    for _ in range(3):
        error, elapsed = await embed_failure(embedder)
        assert "failing fast" in error.message and elapsed < 0.2
    assert fake.hits == 2
    fake.set("ok")
    with anyio.fail_after(5):
        await embedder.until_available()  # the hanging probe times out, the next one closes the breaker
    assert embedder.ready and fake.hits == 3
    assert (await embedder.embed_documents(["after the probe"])).shape == (1, 8)


async def test_with_a_hung_provider_20_concurrent_calls_end_at_the_first_deadline_and_few_go_upstream(
    make_remote: RemoteFactory, fake: FakeEmbeddingServer
) -> None:
    embedder = await make_remote("openai", embedding_max_retries=0, embedding_timeout_s=10.0,
                                 embedding_deadline_s=2.0, embedding_breaker_cooldown_s=0.3)
    fake.set("hang")
    ended: list[float] = []

    async def remember(number: int) -> None:
        await anyio.sleep(number * 0.075)  # arrivals spread over 1.4 s, all before the first deadline
        with pytest.raises(EmbeddingError):
            await embedder.embed_documents([f"memory {number}"])
        ended.append(time.monotonic())

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            for number in range(20):
                group.start_soon(remember, number)
    upstream = fake.hits
    assert len(ended) == 20 and not embedder.ready
    # The first deadline ended every call: none waited a deadline of its own after it.
    assert max(ended) - min(ended) < 1.0
    assert upstream <= 4  # the four a provider may be asked at once; the other 16 never went
    # While it is open, calls never reach the provider: only the background probe does, one at a time.
    assert await anyio.to_thread.run_sync(fake.wait_for_hits, upstream + 1)  # the first probe, hanging
    probed = fake.hits
    for _ in range(5):
        _, elapsed = await embed_failure(embedder)
        assert elapsed < 0.2
    assert fake.hits - probed <= 1  # at most the next probe, after the hanging one's deadline and a cooldown


async def test_concurrent_calls_are_capped_at_four_requests_in_flight(
    make_remote: RemoteFactory, fake: FakeEmbeddingServer
) -> None:
    embedder = await make_remote("jina")
    fake.set("slow")
    async with anyio.create_task_group() as group:
        for i in range(10):
            group.start_soon(embedder.embed_documents, [f"text {i}"])
    assert fake.hits == 10 and fake.state.max_in_flight <= 4


def test_retry_after_accepts_seconds_and_http_dates() -> None:
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # in the past


async def test_the_breaker_follows_the_settings(make_remote: RemoteFactory) -> None:
    embedder = await make_remote("openai", embedding_breaker_failures=2, embedding_breaker_cooldown_s=0.7)
    assert (embedder.breaker.threshold, embedder.breaker.cooldown_s) == (2, 0.7)


def test_the_breaker_opens_at_the_threshold_and_only_a_probe_closes_it() -> None:
    now = [0.0]
    breaker = CircuitBreaker(threshold=2, cooldown_s=3.0, clock=lambda: now[0])
    assert breaker.record_failure() is False and breaker.retry_after() is None  # one failure: still closed
    assert breaker.record_failure() is True  # this one opened it
    assert breaker.retry_after() == pytest.approx(3.0) and breaker.probe_in() == pytest.approx(3.0)
    now[0] = 3.0
    assert breaker.probe_in() == 0.0
    assert breaker.retry_after() is not None  # past the cooldown calls still fail fast: the probe decides
    breaker.probe_failed()
    assert breaker.probe_in() == pytest.approx(3.0) and breaker.is_open
    breaker.record_success()
    assert breaker.retry_after() is None and breaker.failures == 0 and not breaker.is_open


async def test_a_cancelled_call_is_not_counted_as_a_failure(
    make_remote: RemoteFactory, fake: FakeEmbeddingServer
) -> None:
    embedder = await make_remote("jina", embedding_max_retries=0)
    embedder.breaker = CircuitBreaker(threshold=1, cooldown_s=60.0)
    fake.set("hang")
    with anyio.move_on_after(0.3):
        await embedder.embed_documents(["cancelled by its caller"])
    assert embedder.ready and embedder.breaker.failures == 0
    fake.set("ok")
    assert (await embedder.embed_documents(["next call"])).shape == (1, 8)
