"""The Anthropic client every Claude component shares, and the retry policy around its calls.

Retries are ours rather than the SDK's (the client is built with max_retries=0) so that one
policy, configurable per recipe and observable in tests, covers every call: the core's
`emojikit.support.retry.Backoff` (exponential backoff with jitter, honouring the server's
retry-after) on 429, 408/409, 5xx (529 overloaded included), timeouts and connection errors.
Anything else fails at once with one line.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Optional, TypeVar

import anthropic

try:  # the SDK's own HTTP library: httpx2 in anthropic 2.x, httpx before
    import httpx2 as _http
except ImportError:  # pragma: no cover
    import httpx as _http

# Errors of a response body read after the status line (batch results stream): a body cut off
# (RemoteProtocolError) or stalled past the timeout (ReadTimeout). Retried like a dropped connection.
TRANSPORT_ERRORS = (_http.TransportError,)

from emojikit.support import retry
from emojikit.api.errors import RemoteServiceError
from emojikit.api.secrets import require_key, scrub
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


def retryable(exc: BaseException) -> bool:
    """A transient failure: 408/409/429 or 5xx, a timeout, a connection or stream error."""
    if isinstance(exc, anthropic.APIStatusError):
        return exc.status_code in RETRYABLE_STATUS or exc.status_code >= 500
    # APIConnectionError includes APITimeoutError; TRANSPORT_ERRORS: a body cut off or stalled mid-stream (batch results)
    return isinstance(exc, (anthropic.APIConnectionError, *TRANSPORT_ERRORS))


def asked_wait(exc: BaseException) -> Optional[float]:
    return retry.retry_after(exc.response.headers) if isinstance(exc, anthropic.APIStatusError) else None


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
class Backoff(retry.Backoff):
    """The core retry policy with Claude's defaults, Anthropic's errors sorted into retryable
    or not, and each retry logged and shown (`notify`)."""

    max_retries: int = 6
    max_s: float = 60.0
    # Shown to the user as each retry is decided (the teacher prints it; logs get it at INFO).
    notify: Optional[Callable[[str], None]] = None

    @classmethod
    def from_config(cls, cfg: ClaudeClientConfig) -> "Backoff":
        return cls(max_retries=cfg.max_retries, initial_s=cfg.backoff_initial_s, max_s=cfg.backoff_max_s, retry_after_max_s=cfg.retry_after_max_s)

    def call(self, fn: Callable[[], T], what: str) -> T:
        def on_retry(exc: BaseException, retry: int, wait: float) -> None:
            log.info("Anthropic API, %s: %s; retrying in %.2fs", what, scrub(_describe(exc)), wait)
            if self.notify is not None:
                self.notify(scrub(f"{what}: {_describe(exc)}; retry {retry + 1} of {self.max_retries} in {wait:.1f}s"))

        try:
            return self.run(fn, retryable, asked=asked_wait, on_retry=on_retry)
        except (anthropic.APIStatusError, anthropic.APIConnectionError, *TRANSPORT_ERRORS) as exc:
            status = exc.status_code if isinstance(exc, anthropic.APIStatusError) else None
            if not retryable(exc):
                raise APICallError(scrub(f"Anthropic API, {what}: {_describe(exc)}"), status) from None
            raise RetriesExhausted(
                scrub(f"Anthropic API, {what}: still failing after {self.max_retries} retries: {_describe(exc)}"), status
            ) from None


def text_of(message: Any) -> str:
    """The text blocks of a Messages API reply, joined."""
    return "".join(getattr(block, "text", "") for block in message.content if getattr(block, "type", "") == "text")
