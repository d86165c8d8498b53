"""The one retry policy for calls to remote services (the vendor clients of the plugins).

Exponential backoff with jitter, honouring the wait a server asks for (retry-after). What
counts as transient, and what a final failure becomes, is the caller's: a client passes a
`retryable` test and turns the exception `Backoff.run` re-raises into its own one-line error.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, TypeVar

T = TypeVar("T")


def retry_after(headers: Any) -> Optional[float]:
    """Seconds a response's headers ask to wait (retry-after-ms, else retry-after), if any.

    An HTTP-date retry-after (rare from these APIs) gives None: the backoff's own delay then."""
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        try:
            value = headers.get(name)
            if value is not None:
                return max(0.0, float(value) * scale)
        except (AttributeError, TypeError, ValueError):
            continue
    return None


@dataclass
class Backoff:
    """Runs a call with retries; `sleep` and `rng` are attributes so tests can observe the waits.

    `max_retries` retries follow the first attempt. The delay before retry k (0-based) is the
    server's retry-after when it sent one (at most `retry_after_max_s`), else
    min(max_s, initial_s * 2**k) less a random fraction (up to `jitter`) of it, so clients
    that failed together do not retry in step.
    """

    max_retries: int = 4
    initial_s: float = 1.0
    max_s: float = 30.0
    jitter: float = 0.5
    retry_after_max_s: float = 600.0
    sleep: Callable[[float], None] = time.sleep
    rng: random.Random = field(default_factory=random.Random)

    def delay(self, retry: int, asked: Optional[float] = None) -> float:
        """Seconds to wait before retry number `retry` (0-based)."""
        if asked is not None and asked > 0:
            return min(asked, self.retry_after_max_s)
        step = min(self.max_s, self.initial_s * 2.0**retry)
        return step * (1.0 - self.jitter * self.rng.random())

    def run(
        self,
        fn: Callable[[], T],
        retryable: Callable[[BaseException], bool],
        *,
        asked: Callable[[BaseException], Optional[float]] = lambda exc: None,
        on_retry: Optional[Callable[[BaseException, int, float], None]] = None,
    ) -> T:
        """fn(), called again after a delay while it raises an exception that is retryable,
        at most max_retries times. The last exception (a retryable one when the retries ran out,
        any other at once) is re-raised. `asked(exc)`: the wait the server asked for;
        `on_retry(exc, retry, wait)` is told of each retry before its wait."""
        retry = 0
        while True:
            try:
                return fn()
            except Exception as exc:
                if retry >= self.max_retries or not retryable(exc):
                    raise
                wait = self.delay(retry, asked(exc))
                if on_retry is not None:
                    on_retry(exc, retry, wait)
                self.sleep(wait)
                retry += 1
