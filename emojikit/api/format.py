"""The emoji format: how many emoji an answer has, what the sender is told, what counts as valid.

One `EmojiFormat` owns "2-8": the decoder's limits, the data pipeline's check of teacher
answers, the game's prompts and format check, the metrics and evaluations, and `chat` all
read it instead of writing the numbers themselves. `DEFAULT_FORMAT` is the format of every
shipped recipe; a decoder with other limits has its own (`format_of(decoder)`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from emojikit.api import emojis


@dataclass(frozen=True)
class EmojiFormat:
    """Answers of `min_emoji`..`max_emoji` emoji and nothing else (whitespace between them is allowed)."""

    min_emoji: int = 2
    max_emoji: int = 8

    def __post_init__(self) -> None:
        if not 1 <= self.min_emoji <= self.max_emoji:
            raise ValueError(f"an emoji format needs 1 <= min_emoji <= max_emoji, got {self.min_emoji}-{self.max_emoji}")

    @property
    def range_text(self) -> str:
        """"2-8", or "3" when both limits are equal."""
        return str(self.min_emoji) if self.min_emoji == self.max_emoji else f"{self.min_emoji}-{self.max_emoji}"

    @property
    def system_prompt(self) -> str:
        """The sender's system prompt: every SFT example's and the game's first turn.

        Short on purpose: every SFT example and every game turn pays for these tokens on CPU.
        """
        return f"Reply with {self.range_text} emoji only."

    @property
    def follow_up(self) -> str:
        """The game's user turn after a miss; placeholders {guess} and {target}."""
        return (
            'The guesser read your emoji as: "{guess}"\n'
            "The message is still: {target}\n"
            f"Send {self.range_text} more emoji to correct the guess."
        )

    def check(self, text: Optional[str]) -> bool:
        """True when `text` is min_emoji..max_emoji emoji and nothing else."""
        return bool(text) and emojis.is_emoji_only(text, self.min_emoji, self.max_emoji)

    def in_range(self, n_emoji: int) -> bool:
        return self.min_emoji <= n_emoji <= self.max_emoji


DEFAULT_FORMAT = EmojiFormat()


def format_of(decoder: Any) -> EmojiFormat:
    """The format a decoder enforces (its `min_emoji` and `max_emoji`); the default without one."""
    if decoder is None:
        return DEFAULT_FORMAT
    return EmojiFormat(decoder.min_emoji, decoder.max_emoji)


def chat_template_with_system(template: str, system_prompt: str) -> str:
    """A Jinja chat template that starts every conversation without a system message with
    `system_prompt` (before the template's own default, if it has one), so a model exported
    from emojikit answers in its format under plain `apply_chat_template`."""
    import json

    insert = (
        "{%- if not messages or messages[0]['role'] != 'system' -%}"
        "{%- set messages = [{'role': 'system', 'content': " + json.dumps(system_prompt) + "}] + messages -%}"
        "{%- endif -%}"
    )
    return insert + template
