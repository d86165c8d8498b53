"""Config models of the Claude components (no SDK import here, so listing plugins stays fast)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from pydantic import Field, model_validator

from emojikit.api.config import ConfigModel
from emojikit_claude import prompts

API_KEY_VAR = "ANTHROPIC_API_KEY"


class ClaudeClientConfig(ConfigModel):
    """Connection and retry settings every Claude component shares."""

    model: str = Field("claude-sonnet-4-6", description="Claude model id.")
    base_url: Optional[str] = Field(
        None, description="API base URL; unset uses ANTHROPIC_BASE_URL, else https://api.anthropic.com."
    )
    max_retries: int = Field(6, ge=0, description="Retries after a 429, 5xx, timeout or connection error before giving up.")
    backoff_initial_s: float = Field(1.0, ge=0, description="First retry delay; doubles each retry, with jitter.")
    backoff_max_s: float = Field(60.0, ge=0, description="Longest retry delay (a server's retry-after is honoured up to retry_after_max_s).")
    retry_after_max_s: float = Field(600.0, ge=0, description="Longest wait a server's retry-after header may ask for.")
    timeout_s: float = Field(120.0, gt=0, description="Timeout of one HTTP request.")


class ClaudePromptsConfig(ClaudeClientConfig):
    count: int = Field(25000, ge=1, description="Messages to produce when the pipeline asks for all of them.")
    categories: dict[str, str] = Field(
        default_factory=lambda: dict(prompts.CATEGORIES),
        description="Category name -> what messages of that category are like; messages are balanced across them.",
    )
    per_request: int = Field(40, ge=1, le=200, description="Messages asked for in one request.")
    max_tokens: int = Field(4096, ge=64, description="Token limit of one generation request.")
    concurrency: int = Field(4, ge=1, description="Requests in flight at once.")
    max_chars: int = Field(300, ge=10, description="Longer lines are dropped.")
    stall_rounds: int = Field(5, ge=1, description="Stop asking for a category after this many rounds without a new message.")
    file: Optional[Path] = Field(
        None, description="JSONL file the messages are written to and resumed from (default: <run dir>/claude_prompts.jsonl)."
    )


class ClaudeTeacherConfig(ClaudeClientConfig):
    system: str = Field(prompts.TEACHER_SYSTEM, description="System prompt asking for 2-8 emoji.")
    max_tokens: int = Field(64, ge=8, description="Token limit of one answer.")
    min_emoji: int = Field(2, ge=1, description="Answers with fewer emoji are dropped.")
    max_emoji: int = Field(8, ge=1, description="Answers with more emoji are dropped.")
    batch_threshold: int = Field(
        200, ge=1, description="Jobs with at least this many new messages go through the Message Batches API (half price); smaller ones through the Messages API."
    )
    max_batch_size: int = Field(10000, ge=1, le=100000, description="Requests per message batch.")
    poll_interval_s: float = Field(30.0, ge=0, description="Seconds between polls of an unfinished batch.")
    max_wait_s: float = Field(
        26 * 3600.0, ge=0, description="Stop polling after this long; the batch id stays recorded, so a re-run (--resume) picks it up."
    )
    concurrency: int = Field(8, ge=1, description="Messages API requests in flight at once (small jobs).")

    @model_validator(mode="after")
    def _emoji_range(self) -> "ClaudeTeacherConfig":
        if self.max_emoji < self.min_emoji:
            raise ValueError(f"max_emoji ({self.max_emoji}) is below min_emoji ({self.min_emoji})")
        return self


class ClaudeJudgeConfig(ClaudeClientConfig):
    model: str = Field("claude-haiku-4-5", description="Claude model id (the judge is called every turn, so a fast model).")
    system: str = Field(prompts.JUDGE_SYSTEM, description="System prompt of the judge.")
    first_turn: str = Field(prompts.JUDGE_FIRST_TURN, description="User message of the first turn; {emoji} is replaced.")
    next_turn: str = Field(prompts.JUDGE_NEXT_TURN, description="User message after a wrong guess; {emoji} is replaced.")
    max_tokens: int = Field(100, ge=8, description="Token limit of one guess.")
    max_chars: int = Field(200, ge=10, description="Guesses are cut to this many characters at a word boundary.")
    concurrency: int = Field(8, ge=1, description="Requests in flight at once.")
