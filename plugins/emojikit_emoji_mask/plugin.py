"""Decoders: `emoji-mask` (exact emoji-only mask) and `none` (no mask, validation only)."""

from __future__ import annotations

from pydantic import Field, model_validator

from emojikit.api.components import BuildContext, Component
from emojikit.api.config import ConfigModel
from emojikit.api.format import DEFAULT_FORMAT
from emojikit.api.hookspecs import hookimpl


class _CountLimits(ConfigModel):
    min_emoji: int = Field(DEFAULT_FORMAT.min_emoji, ge=1, description="Fewest emoji in an answer; EOS is masked until this many are out.")
    max_emoji: int = Field(DEFAULT_FORMAT.max_emoji, ge=1, description="Most emoji in an answer; after this many only EOS is allowed.")

    @model_validator(mode="after")
    def _ordered(self):
        if self.min_emoji > self.max_emoji:
            raise ValueError(f"min_emoji ({self.min_emoji}) is larger than max_emoji ({self.max_emoji})")
        return self


class EmojiMaskConfig(_CountLimits):
    exclude_flags: bool = Field(False, description="Leave flag emoji (regional-indicator pairs and tag flags) out of the inventory.")
    exclude_skin_tones: bool = Field(False, description="Leave skin-tone variants out of the inventory.")
    exclude_keycaps: bool = Field(False, description="Leave keycap emoji (#️⃣, 0️⃣..9️⃣) out of the inventory.")
    separator: str = Field("", description="Whitespace placed between emoji, e.g. ' ' (default: none).")

    @model_validator(mode="after")
    def _whitespace_separator(self):
        # Only whitespace: emojikit's format check (emojis.is_emoji_only) skips whitespace
        # between emoji and counts any other character as non-emoji text.
        if self.separator and not self.separator.isspace():
            raise ValueError(f"separator must be whitespace (e.g. ' '), got {self.separator!r}")
        return self


class NoneConfig(_CountLimits):
    pass


def _emoji_mask(config: EmojiMaskConfig, ctx: BuildContext):
    from emojikit.support.bundled import cache_dir

    from .decoder import EmojiMaskDecoder

    return EmojiMaskDecoder(
        config.min_emoji,
        config.max_emoji,
        exclude_flags=config.exclude_flags,
        exclude_skin_tones=config.exclude_skin_tones,
        exclude_keycaps=config.exclude_keycaps,
        separator=config.separator,
        cache_dir=cache_dir("masks"),
    )


def _none(config: NoneConfig, ctx: BuildContext):
    from .decoder import NoConstraintDecoder

    return NoConstraintDecoder(config.min_emoji, config.max_emoji)


@hookimpl
def register_decoders():
    return [
        Component(
            name="emoji-mask",
            summary="Exact emoji-only decoding: a byte automaton over the emoji inventory, bound to any tokenizer.",
            config=EmojiMaskConfig,
            factory=_emoji_mask,
        ),
        Component(
            name="none",
            summary="No constraint; still reports whether samples are emoji-only within min..max.",
            config=NoneConfig,
            factory=_none,
        ),
    ]
