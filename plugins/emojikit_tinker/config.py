"""Configs of the Tinker components. Pydantic only: importing this never imports tinker."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from pydantic import Field, field_validator

from emojikit.api.config import ConfigModel

API_KEY_VAR = "TINKER_API_KEY"

DEFAULT_JUDGE_SYSTEM = (
    "You are playing a guessing game. Someone is trying to convey a short message to you using only emoji. "
    "Reconstruct the original message as one short, natural sentence. "
    "Reply with the message only, on one line, without explanation."
)


@dataclass(frozen=True)
class RetrySettings:
    """Transient failures (connection, timeout, rate limit, 5xx) of idempotent requests."""

    max_attempts: int = 5
    backoff_seconds: float = 1.0
    backoff_max_seconds: float = 30.0
    jitter: float = 0.5  # random fraction taken off each delay, so clients do not retry in step
    retry_after_max_seconds: float = 600.0  # longest wait a server's retry-after may ask for

    @classmethod
    def of(cls, config: "TinkerBackendConfig | TinkerJudgeConfig") -> "RetrySettings":
        return cls(config.retry_attempts, config.retry_backoff_seconds, config.retry_backoff_max_seconds, config.retry_jitter)


class TinkerBackendConfig(ConfigModel):
    base_model: str = Field("Qwen/Qwen3.5-4B", description="Tinker base model to train a LoRA adapter on.")
    rank: int = Field(32, ge=1, description="LoRA rank.")
    base_url: Optional[str] = Field(None, description="Tinker service URL (default: the SDK's).")
    init_from: Optional[str] = Field(
        None,
        description="Start weights: a tinker:// state path, or a checkpoint directory written by this backend (e.g. the SFT run's).",
    )
    max_redraws: int = Field(4, ge=0, description="With a decoder: rounds of redrawing samples that fail its check (Tinker cannot mask logits).")
    concurrency: int = Field(32, ge=1, description="Sampling / scoring requests in flight at once.")
    enable_thinking: bool = Field(False, description="Passed to chat templates that support it (Qwen3): False asks for no thinking block.")
    retry_attempts: int = Field(5, ge=1, description="Attempts per idempotent request (sampling, scoring, saving) on transient errors.")
    retry_backoff_seconds: float = Field(1.0, ge=0, description="First retry delay; doubles every attempt.")
    retry_backoff_max_seconds: float = Field(30.0, ge=0, description="Upper bound of a retry delay.")
    retry_jitter: float = Field(0.5, ge=0, le=1, description="Random fraction taken off each delay, so clients do not retry in step.")

    @field_validator("init_from")
    @classmethod
    def _not_empty(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and not value.strip():
            raise ValueError("expected a tinker:// path or a checkpoint directory")
        return value


class TinkerJudgeConfig(ConfigModel):
    model: str = Field("Qwen/Qwen3-30B-A3B-Instruct-2507", description="Tinker base model that guesses the message.")
    base_url: Optional[str] = Field(None, description="Tinker service URL (default: the SDK's).")
    concurrency: int = Field(32, ge=1, description="Guess requests in flight at once.")
    max_tokens: int = Field(48, ge=1, description="Tokens per guess.")
    temperature: float = Field(0.3, ge=0, description="Judge sampling temperature.")
    max_chars: int = Field(200, ge=10, description="A guess is cut to this many characters (at a word boundary).")
    system_prompt: str = Field(DEFAULT_JUDGE_SYSTEM, description="The judge's system prompt.")
    first_turn: str = Field("Emoji: {emoji}", description="User turn carrying the first emoji; placeholder {emoji}.")
    follow_up: str = Field("That is not it. More emoji: {emoji}", description="User turn after a wrong guess; placeholder {emoji}.")
    enable_thinking: bool = Field(False, description="Passed to chat templates that support it.")
    retry_attempts: int = Field(5, ge=1, description="Attempts per idempotent request (sampling, scoring, saving) on transient errors.")
    retry_backoff_seconds: float = Field(1.0, ge=0, description="First retry delay; doubles every attempt.")
    retry_backoff_max_seconds: float = Field(30.0, ge=0, description="Upper bound of a retry delay.")
    retry_jitter: float = Field(0.5, ge=0, le=1, description="Random fraction taken off each delay, so clients do not retry in step.")

    @field_validator("first_turn", "follow_up")
    @classmethod
    def _has_emoji_slot(cls, value: str) -> str:
        if "{emoji}" not in value:
            raise ValueError("must contain the placeholder {emoji}")
        return value
