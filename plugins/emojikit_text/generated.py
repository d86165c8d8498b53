"""The offline prompt source: distinct messages drawn from the category grammars, by seed."""

from __future__ import annotations

import random
from typing import Iterator, Optional

from pydantic import Field, field_validator

from emojikit.api.components import BuildContext, Message
from emojikit.api.components import message_key as dedup_key  # repeats: case, spacing, punctuation left out
from emojikit.api.config import ConfigModel
from emojikit_text.grammar import CATEGORIES, generate

# A category that yields only duplicates this many times in a row is used up.
EXHAUSTED_AFTER = 300


class GeneratedConfig(ConfigModel):
    count: int = Field(25_000, ge=1, description="Messages yielded when the caller asks for all of them.")
    categories: list[str] = Field(list(CATEGORIES), description=f"Categories to draw from, in turn: {', '.join(CATEGORIES)}.")
    seed_offset: int = Field(0, description="Added to the recipe seed, for a different draw with the same recipe seed.")
    max_words: Optional[int] = Field(None, ge=1, description="Skip messages longer than this many words (None = no limit).")

    @field_validator("categories")
    @classmethod
    def _known(cls, value: list[str]) -> list[str]:
        unknown = [c for c in value if c not in CATEGORIES]
        if unknown:
            raise ValueError(f"unknown categories {unknown}; known: {', '.join(CATEGORIES)}")
        if not value:
            raise ValueError("needs at least one category")
        return list(dict.fromkeys(value))


class GeneratedSource:
    def __init__(self, config: GeneratedConfig, seed: int = 0):
        self.config = config
        self.seed = seed + config.seed_offset

    def capacity(self) -> int:
        """At most this many distinct messages (the sum of every template's combinations)."""
        from emojikit_text.grammar import combinations

        return sum(combinations(c) for c in self.config.categories)

    def messages(self, n: Optional[int] = None) -> Iterator[Message]:
        """Round-robin over the categories, skipping repeats; the same seed gives the same sequence.

        Each category has its own random stream, so choosing a subset of categories does not
        change the messages of the others.
        """
        n = self.config.count if n is None else n
        rngs = {c: random.Random(f"emojikit-generated:{self.seed}:{c}") for c in self.config.categories}
        live = list(self.config.categories)
        seen: set[str] = set()
        misses = dict.fromkeys(live, 0)
        produced = 0
        while produced < n and live:
            for category in list(live):
                text = generate(category, rngs[category])
                key = dedup_key(text)
                too_long = self.config.max_words is not None and len(text.split()) > self.config.max_words
                if key in seen or too_long:
                    misses[category] += 1
                    if misses[category] >= EXHAUSTED_AFTER:
                        live.remove(category)
                    continue
                misses[category] = 0
                seen.add(key)
                yield Message(text, category)
                produced += 1
                if produced >= n:
                    return


def build(config: GeneratedConfig, ctx: BuildContext) -> GeneratedSource:
    return GeneratedSource(config, seed=ctx.seed)
