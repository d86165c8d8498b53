"""Retries with exponential backoff and jitter, and a bounded window of requests in flight.

Only idempotent requests go through here (sampling, scoring, saving, creating clients):
a training request that failed half-way must not be sent twice, so forward_backward and
optim_step rely on the SDK's own connection retries and surface any other failure.
"""

from __future__ import annotations

import random
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from emojikit.errors import RemoteServiceError

from emojikit_tinker.config import RetrySettings


def is_transient(exc: BaseException) -> bool:
    import tinker

    transient = (
        tinker.APIConnectionError,  # includes APITimeoutError
        tinker.RateLimitError,
        tinker.InternalServerError,
        ConnectionError,
        TimeoutError,
    )
    return isinstance(exc, transient)


def remote_error(exc: BaseException, what: str) -> RemoteServiceError:
    first_line = (str(exc).strip().splitlines() or [""])[0]
    return RemoteServiceError(f"tinker {what} failed: {type(exc).__name__}: {first_line}")


@dataclass
class Retrier:
    settings: RetrySettings = field(default_factory=RetrySettings)
    sleep: Callable[[float], None] = time.sleep
    rng: random.Random = field(default_factory=random.Random)
    retries: int = 0  # transient failures retried so far (a metric)

    def delay(self, attempt: int) -> float:
        base = min(self.settings.backoff_max_seconds, self.settings.backoff_seconds * 2 ** (attempt - 1))
        return base * (1.0 - self.settings.jitter * self.rng.random())

    def resolve(self, submit: Callable[[], Any], future: Any = None, what: str = "request") -> Any:
        """The result of `submit()` (a future, or a value), resubmitting on transient failures.

        `future` is an already submitted first attempt, if any.
        """
        import tinker

        attempt = 1
        while True:
            try:
                if future is None:
                    future = submit()
                return future.result() if hasattr(future, "result") else future
            except Exception as exc:  # noqa: BLE001 - sorted below
                future = None
                if is_transient(exc) and attempt < self.settings.max_attempts:
                    self.retries += 1
                    self.sleep(self.delay(attempt))
                    attempt += 1
                    continue
                if is_transient(exc) or isinstance(exc, tinker.APIError):
                    raise remote_error(exc, what) from exc
                raise

    def call(self, submit: Callable[[], Any], what: str = "request") -> Any:
        return self.resolve(submit, None, what)

    def gather(self, submits: Sequence[Callable[[], Any]], limit: int, what: str = "request") -> list:
        """Results of every submit, in order, with at most `limit` requests in flight."""
        results: list = [None] * len(submits)
        in_flight: deque[tuple[int, Optional[Any]]] = deque()
        for index, submit in enumerate(submits):
            if len(in_flight) >= limit:
                done, future = in_flight.popleft()
                results[done] = self.resolve(submits[done], future, what)
            in_flight.append((index, self._submit(submit)))
        while in_flight:
            done, future = in_flight.popleft()
            results[done] = self.resolve(submits[done], future, what)
        return results

    @staticmethod
    def _submit(submit: Callable[[], Any]) -> Optional[Any]:
        try:
            return submit()
        except Exception as exc:  # noqa: BLE001
            if is_transient(exc):
                return None  # resolve() resubmits with backoff
            raise
