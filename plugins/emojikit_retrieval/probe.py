"""The `keyword-share` reward: the share of sent emoji whose emojilib keywords include a word
("animal" by default). A trivially learnable reward for the learning probe
(bench/learning_probe.py): if GRPO cannot push the sender toward animal emoji, it cannot
teach the real game either. It ignores the judge: similarity is always 0, so no episode
ends early and every turn is scored.
"""

from __future__ import annotations

import functools
from typing import Sequence

from pydantic import Field

from emojikit.api import emojis
from emojikit.api.components import BuildContext, Episode
from emojikit.api.config import ConfigModel
from emojikit_retrieval.keywords import keywords


class KeywordShareConfig(ConfigModel):
    keyword: str = Field("animal", min_length=1, description="emojilib keyword that makes an emoji count (127 emoji for animal).")


class KeywordShareReward:
    success_threshold = 1.0  # unreachable: similarity is always 0

    def __init__(self, keyword: str):
        self.keyword = keyword

    @functools.lru_cache(maxsize=None)
    def counts(self, seq: str) -> bool:
        return self.keyword in (keywords(seq) or ())

    def share(self, text: str) -> float:
        found = emojis.split(text)
        return sum(self.counts(e) for e in found) / len(found) if found else 0.0

    def similarity(self, targets: Sequence[str], guesses: Sequence[str]) -> list[float]:
        return [0.0] * len(targets)

    def score(self, episodes: Sequence[Episode]) -> list[dict[str, float]]:
        out = []
        for ep in episodes:
            share = sum(self.share(t.emoji) for t in ep.turns) / max(len(ep.turns), 1)
            out.append({"share": share, "total": share})
        return out


def build(cfg: KeywordShareConfig, ctx: BuildContext) -> KeywordShareReward:
    return KeywordShareReward(cfg.keyword)
