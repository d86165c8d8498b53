"""The `local-lm` judge: a local transformers chat model asked to reconstruct the message.

Batched greedy generation with left padding (so every row's answer starts at the same
position); the answer is cleaned to one short line. Small models read emoji poorly and copy
emoji back instead of answering, so by default the model sees the emoji's CLDR names only;
when it still answers with no words, the guess is that literal reading (the names).
"""

from __future__ import annotations

from typing import Any, Literal, Sequence

from pydantic import Field, field_validator

from emojikit.api import emojis
from emojikit.support.bundled import SMOLLM2
from emojikit.api.components import BuildContext, JudgeView
from emojikit.api.config import ConfigModel
from emojikit.play.guesses import clean_guess

DEFAULT_SYSTEM = "You turn emoji into the short everyday message they stand for."
DEFAULT_PROMPT = "{emoji}\n{earlier}Write the message as one short sentence in plain English."
# A base model (no chat template) is shown worked examples and continues the pattern. The
# examples are the project's own, none from a held-out set.
FEW_SHOT = (
    "Emoji: 🎂🎁\nMessage: Happy birthday, I got you a present!\n\n"
    "Emoji: 🚗💥😩\nMessage: I crashed my car this morning.\n\n"
    "Emoji: 📚😴\nMessage: Studying all night, so tired.\n\n"
)
# ... and, asked to name one emoji, examples of naming one.
FEW_SHOT_EACH = "Emoji: 🎂\nMeaning: birthday cake\n\nEmoji: 🚗\nMeaning: car, driving\n\nEmoji: 😩\nMeaning: tired, fed up\n\n"
EACH_PROMPT = "What does the emoji {emoji} mean? Answer with one to three words."


class LocalLMConfig(ConfigModel):
    model: str = Field(SMOLLM2, description="A local model: bundled:smollm2-135m-instruct, bundled:gemma3-270m (a base model, shown worked examples; the third-reader extra), a directory, or a cached Hugging Face id.")
    max_new_tokens: int = Field(32, ge=4, le=256, description="Tokens generated per guess.")
    max_words: int = Field(16, ge=1, description="A guess is cut to this many words.")
    batch_size: int = Field(16, ge=1, description="Views per generate call.")
    show: Literal["names", "emoji", "both"] = Field(
        "names", description="How the judge sees each emoji: its CLDR name (best for small models), the emoji itself, or both."
    )
    system_prompt: str = Field(DEFAULT_SYSTEM, description="The judge's system prompt; empty for none.")
    prompt: str = Field(
        DEFAULT_PROMPT,
        description="The judge's user turn; {emoji}: one line per emoji turn; {earlier}: a line listing its earlier (wrong) guesses, or nothing.",
    )

    @field_validator("prompt")
    @classmethod
    def _check_prompt(cls, value: str) -> str:
        import string

        try:
            names = {n for _, n, _, _ in string.Formatter().parse(value) if n is not None}
        except ValueError as exc:
            raise ValueError(f"not a valid template ({exc})") from None
        if names - {"emoji", "earlier"} or "emoji" not in names:
            raise ValueError("placeholders: {emoji} (required) and {earlier}; write literal braces as {{ and }}")
        return value


class LocalLMJudge:
    def __init__(self, cfg: LocalLMConfig, model: Any, tokenizer: Any):
        self.cfg = cfg
        self.model = model
        self.tokenizer = tokenizer
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token

    def describe(self, emoji_text: str) -> str:
        seqs = emojis.split(emoji_text)
        if self.cfg.show == "emoji":
            return " ".join(seqs)
        if self.cfg.show == "names":
            return emojis.names_text(seqs)
        return ", ".join(f"{s} {emojis.name(s)}".strip() for s in seqs)

    def messages(self, view: JudgeView) -> list[dict[str, str]]:
        label = "Emoji meaning" if self.cfg.show == "names" else "Emoji"
        turns = [self.describe(t) for t in view.emoji_turns]
        lines = [f"{label} {i}: {t}" if len(turns) > 1 else f"{label}: {t}" for i, t in enumerate(turns, 1)]
        earlier = [g for g in view.guesses if g]
        earlier_line = ("Wrong guesses so far: " + "; ".join(f'"{g}"' for g in earlier) + "\n") if earlier else ""
        user = self.cfg.prompt.format(emoji="\n".join(lines), earlier=earlier_line)
        out = [{"role": "system", "content": self.cfg.system_prompt}] if self.cfg.system_prompt else []
        return out + [{"role": "user", "content": user}]

    def completion(self, view: JudgeView) -> str:
        """The prompt of a base model (a tokenizer without a chat template): worked examples,
        then every emoji turn so far on one line. Its earlier guesses are not shown: a base model
        does not follow "not this" (the retrieval over the pool leaves them out instead)."""
        return FEW_SHOT + "Emoji: " + " ".join(self.describe(t) for t in view.emoji_turns) + "\nMessage:"

    def guess(self, views: Sequence[JudgeView]) -> list[str]:
        out = [""] * len(views)
        todo = [i for i, v in enumerate(views) if any(emojis.split(t) for t in v.emoji_turns)]
        for start in range(0, len(todo), self.cfg.batch_size):
            rows = todo[start : start + self.cfg.batch_size]
            for i, text in zip(rows, self._generate([self.prompt(views[i]) for i in rows])):
                literal = " / ".join(n for n in (emojis.names_text(emojis.split(t)) for t in views[i].emoji_turns) if n)
                out[i] = clean_guess(text, max_words=self.cfg.max_words, drop_emoji=True) or " ".join(literal.split()[: self.cfg.max_words])
        return out

    def meaning_prompt(self, emoji: str):
        """What the model is given to name one emoji: a chat question, or worked examples."""
        if self.is_chat_model:
            out = [{"role": "system", "content": self.cfg.system_prompt}] if self.cfg.system_prompt else []
            return out + [{"role": "user", "content": EACH_PROMPT.format(emoji=emoji)}]
        return FEW_SHOT_EACH + f"Emoji: {emoji}\nMeaning:"

    @property
    def is_chat_model(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    def prompt(self, view: JudgeView):
        """What the model is given for a view: chat messages, or a completion text for a base model."""
        return self.messages(view) if self.is_chat_model else self.completion(view)

    def _generate(self, prompts: list) -> list[str]:
        """Greedy continuations of chats (message lists) or plain completion texts; a completion
        ends at its first line break."""
        import torch

        if self.is_chat_model:
            texts = [self.tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in prompts]
        else:
            bos = self.tokenizer.bos_token or ""
            texts = [bos + p for p in prompts]
        batch = self.tokenizer(texts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
        batch = {k: v.to(self.model.device) for k, v in batch.items()}
        with torch.inference_mode():
            out_B_T = self.model.generate(
                **batch,
                max_new_tokens=self.cfg.max_new_tokens,
                do_sample=False,
                # a base model goes on to write the next worked example: stop at the line's end
                **({} if self.is_chat_model else {"stop_strings": ["\n"], "tokenizer": self.tokenizer}),
                pad_token_id=self.tokenizer.pad_token_id,
            )
        new_B_T = out_B_T[:, batch["input_ids"].shape[1] :]
        decoded = self.tokenizer.batch_decode(new_B_T, skip_special_tokens=True)
        return decoded if self.is_chat_model else [d.strip().split("\n")[0] for d in decoded]


def build(cfg: LocalLMConfig, ctx: BuildContext) -> LocalLMJudge:
    from emojikit.support.models import load_model_and_tokenizer

    lm, tokenizer = load_model_and_tokenizer(cfg.model)
    return LocalLMJudge(cfg, lm, tokenizer)
