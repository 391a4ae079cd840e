"""The circuit breaker of remote embedding providers: fail at once while a provider is known down.

Why: a provider that hangs would otherwise cost every call the whole deadline (10 s by default).
After a few failed calls in a row the breaker opens and calls fail at once; recall answers from
keyword search and remember with a 503. Only a background probe (``RemoteEmbedder``) closes it
again, so no user request pays for finding out whether the provider is back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a model child imports the embeddings package: no pydantic there
    from app.settings import Settings


class CircuitBreaker:
    """Closed -> open after ``threshold`` consecutive failures -> closed by a successful probe.

    The breaker only keeps the state; the embedder runs the probes (``RemoteEmbedder``), in the
    background, one at a time, ``cooldown_s`` apart.
    """

    def __init__(self, threshold: int = 5, cooldown_s: float = 5.0, clock: Callable[[], float] = time.monotonic):
        self.threshold = threshold
        self.cooldown_s = cooldown_s
        self._clock = clock
        self.failures = 0
        self._opened_at: float | None = None

    @property
    def is_open(self) -> bool:
        return self._opened_at is not None

    def retry_after(self) -> float | None:
        """None when calls may go ahead, else seconds until the next probe may close the breaker."""
        if self._opened_at is None:
            return None
        return max(0.1, self.cooldown_s - (self._clock() - self._opened_at))

    def probe_in(self) -> float:
        """Seconds until the next probe is due (0 when it is due now)."""
        if self._opened_at is None:
            return 0.0
        return max(0.0, self.cooldown_s - (self._clock() - self._opened_at))

    def record_success(self) -> None:
        self.failures = 0
        self._opened_at = None

    def record_failure(self) -> bool:
        """Count a failed call; True when this failure opened the breaker."""
        self.failures += 1
        if self._opened_at is None and self.failures >= self.threshold:
            self._opened_at = self._clock()
            return True
        return False

    def probe_failed(self) -> None:
        """The provider still fails: stay open for another full cooldown."""
        self.failures += 1
        self._opened_at = self._clock()


def breaker_for(settings: Settings) -> CircuitBreaker:
    """The breaker a remote provider built from ``settings`` uses."""
    return CircuitBreaker(settings.embedding_breaker_failures, settings.embedding_breaker_cooldown_s)
