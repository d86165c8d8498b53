"""The `lm-reader` judge: a local language model reads the raw emoji and writes the message it
sees in them; the guess is the pool message nearest (MiniLM) to what it wrote.

A reader whose knowledge of emoji comes from neither CLDR names (the lexicon teacher and the
`retrieval` judge) nor emojilib's keywords (the `keywords` judge): the model sees only the emoji
characters (`show = "emoji"`) and reads them with what its pre-training taught it. That makes it
the third reader of an RL experiment: a sender that RL made better for `keywords` and that
also wins more here became a better communicator, not a pun on one keyword list.

MiniLM only matches the model's sentence to the pool's messages, as it matches the other
readers' readings; the model writes one sentence per episode state (every turn so far, its wrong
guesses named), cached so that guessing and the belief share one generation.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from pydantic import Field

from emojikit.api import emojis
from emojikit.api.components import BuildContext, JudgeView
from emojikit.play.guesses import clean_guess
from emojikit.support.bundled import SMOLLM2
from emojikit_retrieval.local_lm import DEFAULT_PROMPT, DEFAULT_SYSTEM, LocalLMConfig, LocalLMJudge, load
from emojikit_retrieval.retrieval import RetrievalConfig, RetrievalJudge, draw_distractors


class LMReaderConfig(RetrievalConfig):
    later_turn_weight: float = Field(1.5, gt=0, description="Not read by this judge: the model reads every turn at once and writes one message.")
    model: str = Field(SMOLLM2, description="A local chat model: bundled:smollm2-135m-instruct, a directory, or a cached Hugging Face id.")
    show: str = Field("emoji", pattern="^(emoji|names|both)$", description='What the model sees of each emoji: the emoji itself '
                      '(default: a reading of its own), its CLDR name, or both.')
    max_new_tokens: int = Field(24, ge=4, le=256, description="Tokens generated per reading.")
    batch_size: int = Field(32, ge=1, description="Episode states per generate call.")
    system_prompt: str = Field(DEFAULT_SYSTEM, description="The model's system prompt; empty for none.")
    prompt: str = Field(DEFAULT_PROMPT, description="The model's user turn; {emoji}: one line per emoji turn; {earlier}: its wrong guesses, or nothing.")


class LMReaderJudge(RetrievalJudge):
    def __init__(self, writer: LocalLMJudge, candidates: Sequence[str] = (), **settings):
        self.writer = writer
        self._written: dict[tuple, str] = {}
        super().__init__(candidates, **settings)

    def turn_names(self, emoji_text: str) -> str:
        return self.writer.describe(emoji_text)

    def readings(self, views: Sequence[JudgeView]) -> list[str]:
        """The model's sentence for each view ("" for a view without emoji), generated once per state."""
        keys = [(tuple(v.emoji_turns), tuple(v.guesses)) for v in views]
        todo = list(dict.fromkeys(k for k, v in zip(keys, views) if k not in self._written and any(emojis.split(t) for t in v.emoji_turns)))
        size = self.writer.cfg.batch_size
        for start in range(0, len(todo), size):
            batch = todo[start : start + size]
            chats = [self.writer.messages(JudgeView(list(turns), list(guesses))) for turns, guesses in batch]
            for key, text in zip(batch, self.writer._generate(chats)):
                self._written[key] = clean_guess(text, max_words=self.writer.cfg.max_words, drop_emoji=True)
        if len(self._written) > 50_000:  # a long run: keep memory flat, the next call regenerates what it needs
            self._written = {k: self._written[k] for k in keys if k in self._written}
        return [self._written.get(k, "") for k in keys]

    def _queries(self, views: Sequence[JudgeView]) -> tuple[np.ndarray, np.ndarray]:
        """The embedding of what the model wrote for each view (unit-normalised by MiniLM)."""
        written = self.readings(views)
        texts = list(dict.fromkeys(w for w in written if w))
        emb = dict(zip(texts, self.minilm.encode(texts))) if texts else {}
        query_B_D = np.zeros((len(views), self.minilm.dim), dtype=np.float32)
        for b, w in enumerate(written):
            if w:
                query_B_D[b] = emb[w]
        return query_B_D, np.array([bool(w) for w in written], dtype=bool)


def build(cfg: LMReaderConfig, ctx: BuildContext) -> LMReaderJudge:
    lm_cfg = LocalLMConfig(model=cfg.model, show=cfg.show, max_new_tokens=cfg.max_new_tokens, batch_size=cfg.batch_size,
                           system_prompt=cfg.system_prompt, prompt=cfg.prompt)
    lm, tokenizer = load(cfg.model)
    lm.eval()
    return LMReaderJudge(LocalLMJudge(lm_cfg, lm, tokenizer), draw_distractors(cfg, ctx), later_turn_weight=cfg.later_turn_weight,
                         belief_temperature=cfg.belief_temperature, repeat_guesses=cfg.repeat_guesses)
