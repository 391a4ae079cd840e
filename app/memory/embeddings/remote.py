"""HTTP embedding providers: bounded time, bounded retries, validated answers, no leaked keys.

Failure policy (shared by ``jina`` and ``openai``):

- One total deadline per ``embed_*`` call, retries and waits included (default 10 s, at least
  ``MEMORY_MCP_EMBEDDING_TIMEOUT_S``): remember fails within a known time.
- Each attempt: connect timeout 2 s, read timeout ``MEMORY_MCP_EMBEDDING_TIMEOUT_S``, both
  capped by what is left of the deadline.
- Retries (``MEMORY_MCP_EMBEDDING_MAX_RETRIES``, default 2) only for connection errors,
  timeouts, 408, 429 and 5xx, with jittered exponential backoff; ``Retry-After`` is honoured
  when it fits in the remaining deadline, otherwise the call fails at once.
- Other 4xx (bad key, unknown model) fail at once: retrying cannot help.
- Every answer is checked: count, dimension, NaN/inf, zero vectors (``Embedder.validate``).
- A circuit breaker, shared by every call, opens at the first failed call (``MEMORY_MCP_EMBEDDING_BREAKER_FAILURES``):
  the calls still waiting then fail at once, new ones too (recall answers from keyword search), and one
  background probe at a time asks the provider every few seconds and closes the breaker when it answers.
  No user request ever waits on a probe (a hanging provider would cost it the whole deadline).
- Error messages and logs name provider, model, endpoint and cause, never the API key.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Sequence
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import numpy as np
from pydantic import SecretStr

from app.errors import InvalidInput
from app.memory.embeddings.base import Embedder, EmbeddingError, FailureReason
from app.memory.embeddings.breaker import CircuitBreaker

logger = logging.getLogger(__name__)

USER_AGENT = "memory-mcp/0.1"
DEFAULT_DEADLINE_S = 10.0
CONNECT_TIMEOUT_S = 2.0
MAX_CONCURRENT_REQUESTS = 4
RETRY_STATUSES = frozenset({408, 429}) | frozenset(range(500, 600))
# Client errors about one request's content, not about the provider: they do not trip the breaker.
REQUEST_SPECIFIC_STATUSES = frozenset({400, 413, 422})
DOCUMENT = "document"
QUERY = "query"
PROBE_TEXT = "ping"  # what the background probe embeds: tiny, and says nothing about any memory


def embeddings_endpoint(base_url: str) -> str:
    """``http://h:1/v1`` or ``http://h:1`` or ``http://h:1/v1/embeddings`` -> the embeddings URL.

    Raises:
        InvalidInput: not an http(s) URL.
    """
    parts = urlsplit(base_url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InvalidInput(f"embedding base URL must be an http(s) URL, got {display_url(base_url)!r}")
    path = parts.path.rstrip("/")
    if not path.endswith("/embeddings"):
        path = path + "/embeddings" if path.endswith("/v1") else path + "/v1/embeddings"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def display_url(url: str) -> str:
    """The URL without user info or query string, safe for messages."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or HTTP date), or None."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


class _Retryable(Exception):
    """An attempt failed in a way another attempt may fix."""

    def __init__(self, cause: str, retry_after: float | None = None) -> None:
        super().__init__(cause)
        self.cause = cause
        self.retry_after = retry_after


class RemoteEmbedder(Embedder):
    """Base of HTTP providers speaking the OpenAI ``/v1/embeddings`` response shape."""

    enforces_deadline = True

    def __init__(
        self,
        *,
        model: str,
        endpoint: str,
        api_key: SecretStr | None,
        dimension: int | None,
        timeout_s: float,
        max_retries: int,
        batch_size: int,
        deadline_s: float | None = None,
        breaker: CircuitBreaker | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.model = model
        self.endpoint = endpoint
        self._api_key = api_key.get_secret_value() if api_key is not None else None
        self._dimension = dimension
        self.timeout_s = timeout_s
        self.deadline_s = deadline_s if deadline_s is not None else max(DEFAULT_DEADLINE_S, timeout_s)
        self.max_retries = max_retries
        self.batch_size = batch_size
        self.breaker = breaker or CircuitBreaker()
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self._semaphore: asyncio.Semaphore | None = None
        self._prober: asyncio.Task[None] | None = None
        self._opened: asyncio.Future[None] | None = None

    # --- provider specifics ---
    def _payload(self, texts: list[str], kind: str) -> dict[str, Any]:
        raise NotImplementedError

    # --- interface ---
    @property  # type: ignore[override]
    def dimension(self) -> int:
        if self._dimension is None:
            raise EmbeddingError(f"embedding provider {self.name} ({self.model}): dimension unknown until load()")
        return self._dimension

    async def load(self) -> None:
        """Open the client; discover the dimension with one request when it is not configured.

        Raises:
            EmbeddingError: the probe failed.
        """
        self._ensure_client()
        if self._dimension is None:
            rows = await self._call(["dimension probe"], QUERY, validate=False)
            self._dimension = int(rows.shape[1])
            try:
                self.validate(rows, 1)
            except EmbeddingError:
                self._dimension = None
                raise
            logger.info("embedding provider %s (%s) answers %d-d vectors", self.name, self.model, self._dimension)

    @property
    def ready(self) -> bool:
        """Calls go to the provider: the dimension is known and the breaker is closed."""
        return self._dimension is not None and not self.breaker.is_open

    def status(self) -> dict[str, Any]:
        return {**super().status(), "breaker": "open" if self.breaker.is_open else "closed",
                "consecutive_failures": self.breaker.failures}

    async def close(self) -> None:
        prober, self._prober = self._prober, None
        if prober is not None and not prober.done():
            prober.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await prober
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.empty((0, self.dimension), dtype=np.float32)
        return await self._call(list(texts), DOCUMENT)

    async def embed_query(self, text: str) -> np.ndarray:
        return (await self._call([text], QUERY))[0]

    # --- machinery ---
    def _ensure_client(self) -> httpx.AsyncClient:
        if self._client is None:
            headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
            if self._api_key:
                headers["Authorization"] = f"Bearer {self._api_key}"
            self._client = httpx.AsyncClient(
                headers=headers,
                transport=self._transport,
                limits=httpx.Limits(max_connections=MAX_CONCURRENT_REQUESTS * 2),
                follow_redirects=False,
                trust_env=False,  # a proxy variable must not silently reroute embedding traffic
            )
        return self._client

    def _error(
        self, cause: str, *, reason: FailureReason = "unavailable", retry_after_s: float | None = None
    ) -> EmbeddingError:
        message = f"embedding provider {self.name} (model {self.model}) at {display_url(self.endpoint)}: {cause}"
        return EmbeddingError(self._redact(message), retry_after_s=retry_after_s, reason=reason)

    def _redact(self, text: str) -> str:
        return text.replace(self._api_key, "***") if self._api_key else text

    def _failing_fast(self, wait: float) -> EmbeddingError:
        return self._error(
            f"failing fast after {self.breaker.failures} consecutive failures (probed in the background); "
            f"retry in {wait:.1f}s",
            retry_after_s=wait,
        )

    async def _call(self, texts: list[str], kind: str, *, validate: bool = True) -> np.ndarray:
        """Embed under the breaker: fail at once while it is open, count failures, start the probe.

        Calls already waiting when the breaker opens stop waiting too: with a hung provider, the first
        call to reach its deadline ends every concurrent one, instead of each paying its own deadline.
        """
        wait = self.breaker.retry_after()
        if wait is not None:
            raise self._failing_fast(wait)
        attempt = asyncio.ensure_future(self._within_deadline(texts, kind, validate))
        opened = self._open_signal()
        try:
            await asyncio.wait({attempt, opened}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not attempt.done():
                attempt.cancel()
                with contextlib.suppress(asyncio.CancelledError, EmbeddingError):
                    await attempt
        if attempt.cancelled():  # the breaker opened while this call waited
            raise self._failing_fast(self.breaker.retry_after() or self.breaker.cooldown_s)
        try:
            rows = attempt.result()
        except EmbeddingError as exc:
            if not exc.request_specific and self.breaker.record_failure():
                logger.warning("embedding provider %s (%s) failed %d times in a row: failing fast, probing every %gs",
                               self.name, self.model, self.breaker.failures, self.breaker.cooldown_s)
                if not opened.done():
                    opened.set_result(None)
                self._start_probing()
            raise
        self.breaker.record_success()
        return rows

    def _open_signal(self) -> asyncio.Future[None]:
        """The future every call in flight waits on beside its request; set when the breaker opens."""
        if self._opened is None or self._opened.done():
            self._opened = asyncio.get_running_loop().create_future()
        return self._opened

    async def _within_deadline(self, texts: list[str], kind: str, validate: bool) -> np.ndarray:
        """Embed in batches under one total deadline.

        Raises:
            EmbeddingError: a batch failed, or the deadline passed.
        """
        deadline = asyncio.get_running_loop().time() + self.deadline_s
        try:
            async with asyncio.timeout_at(deadline):
                parts = [
                    await self._embed_batch(texts[i : i + self.batch_size], kind, deadline, validate)
                    for i in range(0, len(texts), self.batch_size)
                ]
        except TimeoutError:
            raise self._error(f"no complete answer within the {self.deadline_s:g}s deadline") from None
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    async def until_available(self) -> None:
        """Return once the background probe has closed the breaker (at once when it is closed)."""
        prober = self._prober
        if prober is not None and not prober.done():
            await asyncio.shield(prober)

    def _start_probing(self) -> None:
        if self._prober is None or self._prober.done():
            self._prober = asyncio.get_running_loop().create_task(
                self._probe_until_closed(), name=f"embedding-probe-{self.name}")

    async def _probe_until_closed(self) -> None:
        """One small request every ``cooldown_s`` until the provider answers with a usable vector."""
        while self.breaker.is_open:
            await asyncio.sleep(self.breaker.probe_in())
            try:
                await self._within_deadline([PROBE_TEXT], QUERY, True)
            except EmbeddingError as exc:
                if not exc.request_specific:  # a refusal of this text still proves the provider answers
                    self.breaker.probe_failed()
                    logger.warning("embedding provider %s (%s) still failing (probe): %s; next probe in %gs",
                                   self.name, self.model, exc.message, self.breaker.cooldown_s)
                    continue
            self.breaker.record_success()
            logger.info("embedding provider %s (%s) answers again: breaker closed", self.name, self.model)

    async def _embed_batch(self, texts: list[str], kind: str, deadline: float, validate: bool) -> np.ndarray:
        body = await self._post_with_retries(self._payload(texts, kind), deadline)
        rows = self._parse(body, len(texts))
        return self.validate(rows, len(texts)) if validate else rows

    async def _post_with_retries(self, payload: dict[str, Any], deadline: float) -> Any:
        loop = asyncio.get_running_loop()
        for attempt in range(self.max_retries + 1):
            try:
                return await self._attempt(payload, deadline)
            except _Retryable as failure:
                cause, retry_after = failure.cause, failure.retry_after
            attempts = f"{attempt + 1} attempt{'s' if attempt else ''}"
            if attempt == self.max_retries:
                raise self._error(f"{cause} (gave up after {attempts})", retry_after_s=retry_after)
            delay = retry_after if retry_after is not None else self._backoff(attempt)
            if delay >= deadline - loop.time():
                raise self._error(
                    f"{cause}; a retry in {delay:.1f}s does not fit the {self.deadline_s:g}s deadline ({attempts})",
                    retry_after_s=delay,
                )
            logger.warning(
                "embedding provider %s (%s) attempt %d failed: %s; retrying in %.2fs",
                self.name, self.model, attempt + 1, cause, delay,
            )
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover - the loop always returns or raises

    @staticmethod
    def _backoff(attempt: int) -> float:
        return min(2.0, 0.2 * 2**attempt) * random.uniform(0.8, 1.2)

    async def _attempt(self, payload: dict[str, Any], deadline: float) -> Any:
        """One POST; returns the parsed JSON body.

        Raises:
            _Retryable: a failure worth another attempt.
            EmbeddingError: a failure that retrying cannot fix.
        """
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(MAX_CONCURRENT_REQUESTS)
        client = self._ensure_client()
        async with self._semaphore:
            remaining = max(0.05, deadline - asyncio.get_running_loop().time())
            timeout = httpx.Timeout(min(self.timeout_s, remaining), connect=min(CONNECT_TIMEOUT_S, remaining))
            try:
                response = await client.post(self.endpoint, json=payload, timeout=timeout)
            except httpx.TimeoutException as exc:
                raise _Retryable(f"no response in time ({type(exc).__name__})") from exc
            except (httpx.NetworkError, httpx.RemoteProtocolError) as exc:
                detail = self._redact(str(exc)) or "no detail"
                raise _Retryable(f"connection failed ({type(exc).__name__}: {detail})") from exc
            except httpx.HTTPError as exc:
                raise self._error(f"request failed ({type(exc).__name__}: {exc})") from exc
        if response.is_success:
            return self._json(response)
        raise self._status_failure(response)

    def _status_failure(self, response: httpx.Response) -> Exception:
        snippet = " ".join(response.text[:300].split())
        cause = f"HTTP {response.status_code}" + (f": {self._redact(snippet)}" if snippet else "")
        if response.status_code in RETRY_STATUSES:
            return _Retryable(cause, parse_retry_after(response.headers.get("retry-after")))
        hint = " (check the API key)" if response.status_code in (401, 403) else ""
        error = self._error(cause + hint, reason="rejected")
        error.request_specific = response.status_code in REQUEST_SPECIFIC_STATUSES
        return error

    def _json(self, response: httpx.Response) -> Any:
        try:
            return response.json()
        except ValueError as exc:
            raise self._error("answered with a body that is not JSON", reason="invalid") from exc

    def _parse(self, body: Any, expected: int) -> np.ndarray:
        """The ``data[].embedding`` rows in input order, as a 2-D float32 array."""
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list):
            raise self._error("answer has no 'data' list", reason="invalid")
        if len(data) != expected:
            raise self._error(f"returned {len(data)} embeddings for {expected} texts", reason="invalid")
        if not all(isinstance(item, dict) for item in data):
            raise self._error("answer 'data' items are not objects", reason="invalid")
        if all(isinstance(item.get("index"), int) for item in data):
            data = sorted(data, key=lambda item: item["index"])
        try:
            rows = np.asarray([item.get("embedding") for item in data], dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise self._error("embeddings are not equal-length lists of numbers", reason="invalid") from exc
        if rows.ndim != 2 or rows.shape[1] == 0:
            raise self._error("embeddings are not lists of numbers", reason="invalid")
        return rows
