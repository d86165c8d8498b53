"""Retries (the core's `emojikit.support.retry.Backoff`) and a bounded window of requests in flight.

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

from emojikit.support import retry
from emojikit.api.errors import RemoteServiceError
from emojikit.api.secrets import scrub

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


class RetriesExhausted(RemoteServiceError):
    """A transient failure that outlasted every attempt."""


def remote_error(exc: BaseException, what: str) -> RemoteServiceError:
    first_line = scrub((str(exc).strip().splitlines() or [""])[0])
    if is_transient(exc):
        return RetriesExhausted(f"tinker {what} failed after retries: {type(exc).__name__}: {first_line}")
    return RemoteServiceError(f"tinker {what} failed: {type(exc).__name__}: {first_line}")


def asked_wait(exc: BaseException) -> Optional[float]:
    """Seconds a 429/503 response asked us to wait (retry-after-ms or retry-after), if any."""
    return retry.retry_after(getattr(getattr(exc, "response", None), "headers", None))


@dataclass
class Retrier:
    settings: RetrySettings = field(default_factory=RetrySettings)
    sleep: Callable[[float], None] = time.sleep
    rng: random.Random = field(default_factory=random.Random)
    retries: int = 0  # transient failures retried so far (a metric)
    gave_up: int = 0  # requests given up as None by gather(give_up_as_none=True)

    @property
    def backoff(self) -> retry.Backoff:
        """The core policy for these settings, sharing this retrier's sleep and rng."""
        s = self.settings
        return retry.Backoff(
            max_retries=s.max_attempts - 1, initial_s=s.backoff_seconds, max_s=s.backoff_max_seconds,
            jitter=s.jitter, retry_after_max_s=s.retry_after_max_seconds, sleep=self.sleep, rng=self.rng,
        )

    def resolve(self, submit: Callable[[], Any], future: Any = None, what: str = "request") -> Any:
        """The result of `submit()` (a future, or a value), resubmitting on transient failures.

        `future` is an already submitted first attempt, if any.
        """
        import tinker

        pending = [] if future is None else [future]

        def attempt() -> Any:
            current = pending.pop() if pending else submit()
            return current.result() if hasattr(current, "result") else current

        def count(exc: BaseException, retry_index: int, wait: float) -> None:
            self.retries += 1

        try:
            return self.backoff.run(attempt, is_transient, asked=asked_wait, on_retry=count)
        except Exception as exc:  # noqa: BLE001 - sorted here
            if is_transient(exc) or isinstance(exc, tinker.APIError):
                raise remote_error(exc, what) from exc
            raise

    def call(self, submit: Callable[[], Any], what: str = "request") -> Any:
        return self.resolve(submit, None, what)

    def gather(self, submits: Sequence[Callable[[], Any]], limit: int, what: str = "request", *, give_up_as_none: bool = False) -> list:
        """Results of every submit, in order, with at most `limit` requests in flight.

        With give_up_as_none, a request whose transient failures outlast the retries gives
        None in its place instead of failing the whole batch.
        """
        results: list = [None] * len(submits)
        in_flight: deque[tuple[int, Optional[Any]]] = deque()

        def finish(done: int, future: Optional[Any]) -> None:
            try:
                results[done] = self.resolve(submits[done], future, what)
            except RetriesExhausted:
                if not give_up_as_none:
                    raise
                self.gave_up += 1

        for index, submit in enumerate(submits):
            if len(in_flight) >= limit:
                finish(*in_flight.popleft())
            in_flight.append((index, self._submit(submit)))
        while in_flight:
            finish(*in_flight.popleft())
        return results

    @staticmethod
    def _submit(submit: Callable[[], Any]) -> Optional[Any]:
        try:
            return submit()
        except Exception as exc:  # noqa: BLE001
            if is_transient(exc):
                return None  # resolve() resubmits with backoff
            raise
