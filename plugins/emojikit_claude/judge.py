"""The `claude` judge: one Messages API conversation per episode, requests in parallel.

The conversation replays the episode: each emoji turn is a user message and each earlier
guess the assistant's reply to it, so Claude sees its own wrong guesses as its own.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Optional, Sequence

from emojikit.api.components import BuildContext, JudgeView
from emojikit.play.guesses import clean_guess
from emojikit_claude.client import Backoff, RetriesExhausted, make_client, text_of
from emojikit_claude.settings import ClaudeJudgeConfig

EMPTY_TURN = "(no emoji)"  # the API rejects empty content; an invalid turn still counts as a turn
EMPTY_GUESS = "(no guess)"
log = logging.getLogger(__name__)


class ClaudeJudge:
    def __init__(self, cfg: ClaudeJudgeConfig, ctx: BuildContext, client=None):
        self.cfg = cfg
        self.client = client if client is not None else make_client(cfg, "the claude judge")
        self.backoff = Backoff.from_config(cfg)

    def conversation(self, view: JudgeView) -> list[dict]:
        """Alternating user (emoji) and assistant (earlier guess) messages, ending with a user turn."""
        turns: list[dict] = []
        for i, emoji in enumerate(view.emoji_turns):
            template = self.cfg.first_turn if i == 0 else self.cfg.next_turn
            turns.append({"role": "user", "content": template.format(emoji=emoji.strip() or EMPTY_TURN)})
            if i < len(view.emoji_turns) - 1:
                guess = view.guesses[i] if i < len(view.guesses) else ""
                turns.append({"role": "assistant", "content": guess.strip() or EMPTY_GUESS})
        return turns

    def _guess_one(self, view: JudgeView) -> Optional[str]:
        """The guess, or None when the request still failed after its retries (the game ends
        that episode as failed). Errors that retrying cannot fix (401, 400) still raise."""
        if not view.emoji_turns:
            return ""
        try:
            reply = self.backoff.call(
                lambda: self.client.messages.create(
                    model=self.cfg.model,
                    max_tokens=self.cfg.max_tokens,
                    system=self.cfg.system,
                    messages=self.conversation(view),
                ),
                "judge guess",
            )
        except RetriesExhausted as exc:
            log.warning("%s; this episode is dropped", exc)
            return None
        return clean_guess(text_of(reply), max_chars=self.cfg.max_chars)

    def guess(self, views: Sequence[JudgeView]) -> list[Optional[str]]:
        if not views:
            return []
        with ThreadPoolExecutor(max_workers=min(self.cfg.concurrency, len(views))) as pool:
            return list(pool.map(self._guess_one, views))
