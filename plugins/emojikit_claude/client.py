"""The Anthropic client every Claude component shares, and the retry policy around its calls.

Retries are ours rather than the SDK's (the client is built with max_retries=0) so that one
policy, configurable per recipe and observable in tests, covers every call: exponential
backoff with jitter on 429, 408/409, 5xx (529 overloaded included), timeouts and connection
errors, honouring the server's retry-after. Anything else fails at once with one line.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, TypeVar

import anthropic

try:  # the SDK's own HTTP library: httpx2 in anthropic 2.x, httpx before
    import httpx2 as _http
except ImportError:  # pragma: no cover
    import httpx as _http

# Errors of a response body read after the status line (batch results stream): a body cut off
# (RemoteProtocolError) or stalled past the timeout (ReadTimeout). Retried like a dropped connection.
TRANSPORT_ERRORS = (_http.TransportError,)

from emojikit.errors import RemoteServiceError
from emojikit.secrets import require_key, scrub
from emojikit_claude.settings import API_KEY_VAR, ClaudeClientConfig

log = logging.getLogger(__name__)
T = TypeVar("T")

RETRYABLE_STATUS = frozenset({408, 409, 429})


def api_key(what: str) -> str:
    """The key from the environment or .env; a MissingCredentialError naming the variable otherwise."""
    return require_key(API_KEY_VAR, what)


def make_client(cfg: ClaudeClientConfig, what: str) -> anthropic.Anthropic:
    # base_url=None lets the SDK read ANTHROPIC_BASE_URL; the key is passed explicitly so a
    # .env key works and the SDK's own credential discovery (profiles, env) stays out of it.
    return anthropic.Anthropic(
        api_key=api_key(what),
        base_url=cfg.base_url,
        max_retries=0,
        timeout=cfg.timeout_s,
    )


class APICallError(RemoteServiceError):
    """A call failed for good; `status` is the HTTP status (None for connection errors)."""

    def __init__(self, message: str, status: Optional[int] = None):
        super().__init__(message)
        self.status = status


class RetriesExhausted(APICallError):
    """A transient failure (429, 5xx, timeout, connection) that outlasted every retry."""


def _retry_after(headers: Any) -> Optional[float]:
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(0.0, float(value) * scale)
        except ValueError:
            continue  # an HTTP date: rare from this API; fall back to our own backoff
    return None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, anthropic.APIStatusError):
        body = exc.body if isinstance(exc.body, dict) else {}
        err = body.get("error") if isinstance(body.get("error"), dict) else {}
        detail = f"{err.get('type', '')}: {err.get('message', '')}".strip(": ") or exc.message
        return f"HTTP {exc.status_code} {detail}"
    if isinstance(exc, (anthropic.APITimeoutError, _http.TimeoutException)):
        return "request timed out"
    if isinstance(exc, _http.TransportError):
        return f"connection error ({type(exc).__name__}: {exc})"
    return f"connection error ({type(exc.__cause__ or exc).__name__})"


@dataclass
class Backoff:
    """Runs a call with retries; `sleep` and `rng` are attributes so tests can observe the waits."""

    max_retries: int = 6
    initial_s: float = 1.0
    max_s: float = 60.0
    retry_after_max_s: float = 600.0
    sleep: Callable[[float], None] = time.sleep
    rng: random.Random = field(default_factory=random.Random)
    # Shown to the user as each retry is decided (the teacher prints it; logs get it at INFO).
    notify: Optional[Callable[[str], None]] = None

    @classmethod
    def from_config(cls, cfg: ClaudeClientConfig) -> "Backoff":
        return cls(cfg.max_retries, cfg.backoff_initial_s, cfg.backoff_max_s, cfg.retry_after_max_s)

    def delay(self, retry: int, retry_after: Optional[float]) -> float:
        """Seconds to wait before retry number `retry` (0-based)."""
        if retry_after is not None and retry_after > 0:
            return min(retry_after, self.retry_after_max_s)
        # Jitter in [0.5, 1] of the exponential step spreads out clients that failed together.
        step = min(self.max_s, self.initial_s * 2.0**retry)
        return step * (0.5 + 0.5 * self.rng.random())

    def call(self, fn: Callable[[], T], what: str) -> T:
        for retry in range(self.max_retries + 1):
            try:
                return fn()
            except anthropic.APIStatusError as exc:
                retryable = exc.status_code in RETRYABLE_STATUS or exc.status_code >= 500
                status, retry_after = exc.status_code, _retry_after(exc.response.headers)
                error: BaseException = exc
            except anthropic.APIConnectionError as exc:  # includes APITimeoutError
                retryable, status, retry_after, error = True, None, None, exc
            except TRANSPORT_ERRORS as exc:  # a body cut off or stalled mid-stream (batch results)
                retryable, status, retry_after, error = True, None, None, exc
            if not retryable:
                raise APICallError(scrub(f"Anthropic API, {what}: {_describe(error)}"), status) from None
            if retry == self.max_retries:
                raise RetriesExhausted(
                    scrub(f"Anthropic API, {what}: still failing after {self.max_retries} retries: {_describe(error)}"), status
                ) from None
            wait = self.delay(retry, retry_after)
            log.info("Anthropic API, %s: %s; retrying in %.2fs", what, scrub(_describe(error)), wait)
            if self.notify is not None:
                self.notify(scrub(f"{what}: {_describe(error)}; retry {retry + 1} of {self.max_retries} in {wait:.1f}s"))
            self.sleep(wait)
        raise AssertionError("unreachable")


def text_of(message: Any) -> str:
    """The text blocks of a Messages API reply, joined."""
    return "".join(getattr(block, "text", "") for block in message.content if getattr(block, "type", "") == "text")
