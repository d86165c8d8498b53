"""The `retrieval` judge: reads emoji by their CLDR names and retrieves the nearest message
from a candidate pool by MiniLM similarity.

The query of an episode is built from all its emoji turns so far: each turn's emoji names
joined ("pizza, fork and knife with plate") are embedded, and the query is the weighted sum
of the turn embeddings, turn t (from 0) weighing `later_turn_weight ** t`, so a correcting
turn can outweigh the first one. The judge never repeats a guess it already made in the
episode (unless repeat_guesses): its earlier guesses (JudgeView.guesses) are masked out of the pool. Its belief in
the true target (`TargetBelief`) is the softmax of the same cosines over the pool.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any, Literal, Optional, Sequence

import numpy as np
from pydantic import Field, field_validator

from emojikit.api import emojis
from emojikit.composition.assembly import ComponentChoice, choose, construct, context, preflight as preflight_choice
from emojikit.api.components import BuildContext, JudgeView
from emojikit.api.config import ConfigModel, ExistingPath
from emojikit.api.errors import ConfigError, InputFileError, PluginError
from emojikit.play.embedding import MiniLM, get_minilm
from emojikit.support.cpu import cpu_features, has_bf16_units
from emojikit.support.io import read_jsonl

DISTRACTOR_SOURCE = "generated"  # the default: the offline prompt source of plugins/emojikit_text
DISTRACTOR_SEED_OFFSET = 1_000_003  # distractors must not be the run's own targets


class RetrievalConfig(ConfigModel):
    pool_file: Optional[ExistingPath] = Field(
        None,
        description='JSONL of candidate messages (one object with a "text" key per line); when set, distractors are drawn from it.',
    )
    distractors: int = Field(
        256,
        ge=0,
        description="How many distractor messages join the pool (besides the game's targets): drawn, seeded, from pool_file "
        "when set, otherwise from distractor_source. 0 for none.",
    )
    distractor_source: dict[str, Any] = Field(
        default_factory=lambda: {"use": DISTRACTOR_SOURCE},
        description="The prompt source distractors come from when pool_file is unset: a table with `use` and that source's "
        'settings, e.g. {use = "chitchat", split = "heldout"} for messages people wrote in chats no training split holds.',
    )

    @field_validator("distractor_source")
    @classmethod
    def _names_a_source(cls, value: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(value.get("use"), str) or not value["use"]:
            raise ValueError('needs `use = "<prompt source>"`')
        return value
    later_turn_weight: float = Field(
        1.5, gt=0, description="Turn t (from 0) weighs later_turn_weight**t in the query; above 1, corrections count more."
    )
    belief_temperature: float = Field(
        0.05, gt=0, description="The judge's belief in each candidate is softmax(cosine / belief_temperature) over the pool "
        "(read by the similarity reward's listener_weight); lower is more certain."
    )
    repeat_guesses: bool = Field(
        False, description="May guess a message it already guessed in the episode (off: earlier guesses leave the pool, so a "
        "resent answer still moves the game; on: a repair must change the judge's reading, or it guesses the same message again)."
    )
    encoder_dtype: Literal["float32", "bfloat16", "auto"] = Field(
        "float32", description='The precision MiniLM reads in: "auto" is bfloat16 on a CPU with bfloat16 matmul units, float32 '
        "elsewhere (the data stage's readings: 179 s against 242 s on an AMD EPYC with AVX512-BF16, the pairs ranked the same: "
        "Spearman 0.99996)."
    )


def encoder(dtype: str) -> MiniLM:
    """The shared MiniLM in the judge's precision (a bfloat16 one keeps its own cache)."""
    if dtype == "auto":
        dtype = "bfloat16" if has_bf16_units(cpu_features()) else "float32"
    return get_minilm(dtype=dtype)


def read_pool_file(path: Path) -> list[str]:
    """The "text" of every row; a row without one is an error naming file:line."""
    line_numbers = [n for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1) if line.strip()]
    texts = []
    for number, row in zip(line_numbers, read_jsonl(path)):
        text = row.get("text")
        if not isinstance(text, str) or not text.strip():
            raise InputFileError(f"{path}:{number}: expected a non-empty \"text\" string")
        texts.append(text.strip())
    return texts


def _distractor_choice(cfg: RetrievalConfig, ctx: BuildContext) -> ComponentChoice:
    """distractor_source looked up and its settings validated, under the judge's table name."""
    name = cfg.distractor_source["use"]
    settings = {k: v for k, v in cfg.distractor_source.items() if k != "use"}
    try:
        return choose("prompt_source", name, settings, ctx, table="judge.distractor_source")
    except PluginError as exc:  # not installed: say what else the judge can take
        raise ConfigError(f"{exc}; set pool_file, another distractor_source or distractors = 0") from None


def preflight(cfg: RetrievalConfig, ctx: BuildContext) -> None:
    # The source's own settings and preflight, before anything loads (as a mix checks its sources).
    if cfg.distractors > 0 and cfg.pool_file is None:
        preflight_choice(_distractor_choice(cfg, context(ctx)), context(ctx))


def draw_distractors(cfg: RetrievalConfig, ctx: BuildContext) -> list[str]:
    if cfg.distractors == 0:
        return []
    seed = ctx.seed + DISTRACTOR_SEED_OFFSET
    if cfg.pool_file is not None:
        pool = list(dict.fromkeys(read_pool_file(cfg.pool_file)))
        return pool if len(pool) <= cfg.distractors else random.Random(seed).sample(pool, cfg.distractors)
    # Through the assembly seam, from the registry the judge itself came from.
    seeded = dataclasses.replace(context(ctx), seed=seed)
    choice = _distractor_choice(cfg, seeded)
    preflight_choice(choice, seeded)
    return [m.text for m in construct(choice, seeded).messages(cfg.distractors)]


class RetrievalJudge:
    def __init__(self, candidates: Sequence[str] = (), later_turn_weight: float = 1.5, minilm=None, belief_temperature: float = 0.05, repeat_guesses: bool = False):
        self.repeat_guesses = repeat_guesses
        self.minilm = minilm or get_minilm()
        self.later_turn_weight = later_turn_weight
        self.belief_temperature = belief_temperature
        self.candidates: list[str] = []
        self._index: dict[str, int] = {}
        self._emb_P_D = np.zeros((0, self.minilm.dim), dtype=np.float32)
        self._pending: list[str] = []
        self.add_candidates(candidates)

    def add_candidates(self, texts: Sequence[str]) -> None:
        """Add messages to the pool (duplicates ignored); embedded in one batch at the next guess."""
        for text in texts:
            text = text.strip()
            if text and text not in self._index:
                self._index[text] = len(self.candidates)
                self.candidates.append(text)
                self._pending.append(text)

    def _pool(self) -> np.ndarray:
        if self._pending:
            self._emb_P_D = np.vstack([self._emb_P_D, self.minilm.encode(self._pending)])
            self._pending = []
        return self._emb_P_D

    @staticmethod
    def turn_names(emoji_text: str) -> str:
        return emojis.names_text(emojis.split(emoji_text))

    def _queries(self, views: Sequence[JudgeView]) -> tuple[np.ndarray, np.ndarray]:
        """(each view's unit query embedding, whether the view had anything to read): the turns'
        readings, later turns weighing more."""
        names_per_view = [[self.turn_names(t) for t in v.emoji_turns] for v in views]
        texts = list(dict.fromkeys(n for names in names_per_view for n in names if n))
        emb = dict(zip(texts, self.minilm.encode(texts))) if texts else {}

        query_B_D = np.zeros((len(views), self.minilm.dim), dtype=np.float32)
        readable_B = np.zeros(len(views), dtype=bool)
        for b, names in enumerate(names_per_view):
            for t, n in enumerate(names):
                if n:
                    query_B_D[b] += (self.later_turn_weight**t) * emb[n]
                    readable_B[b] = True
        # Cosine, not dot: normalising keeps weights relative however many turns there are.
        query_B_D /= np.maximum(np.linalg.norm(query_B_D, axis=1, keepdims=True), 1e-12)
        return query_B_D, readable_B

    def _scores(self, views: Sequence[JudgeView]) -> tuple[np.ndarray, np.ndarray]:
        """(cosine of each view's query to each pool message, with the judge's earlier guesses
        at -inf; whether the view had anything to read)."""
        pool_P_D = self._pool()
        query_B_D, readable_B = self._queries(views)
        scores_B_P = query_B_D @ pool_P_D.T
        for b, view in enumerate(views if not self.repeat_guesses else ()):
            for earlier in view.guesses:
                if earlier in self._index:
                    scores_B_P[b, self._index[earlier]] = -np.inf
        return scores_B_P, readable_B

    def guess(self, views: Sequence[JudgeView]) -> list[str]:
        if not views:
            return []
        scores_B_P, readable_B = self._scores(views)
        out = []
        for b in range(len(views)):
            if not readable_B[b] or scores_B_P.shape[1] == 0:
                out.append("")  # nothing to read (or nothing to retrieve from)
                continue
            best = int(np.argmax(scores_B_P[b]))
            out.append("" if scores_B_P[b, best] == -np.inf else self.candidates[best])
        return out

    def target_logprobs(self, views: Sequence[JudgeView], targets: Sequence[str]) -> list[Optional[float]]:
        """log softmax(cosine / belief_temperature) over the pool at the target (earlier
        guesses excluded, as when guessing); an unreadable view gives every candidate the same
        chance; None for a target outside the pool."""
        if not views:
            return []
        scores_B_P, readable_B = self._scores(views)
        out: list[Optional[float]] = []
        for b, target in enumerate(targets):
            i = self._index.get(target.strip())
            if i is None or scores_B_P[b, i] == -np.inf:
                out.append(None)
                continue
            logits_P = np.where(np.isfinite(scores_B_P[b]), scores_B_P[b] / self.belief_temperature if readable_B[b] else 0.0, -np.inf)
            top = float(np.max(logits_P))
            out.append(float(logits_P[i] - top - np.log(np.sum(np.exp(logits_P - top)))))
        return out


def build(cfg: RetrievalConfig, ctx: BuildContext) -> RetrievalJudge:
    return RetrievalJudge(draw_distractors(cfg, ctx), later_turn_weight=cfg.later_turn_weight, minilm=encoder(cfg.encoder_dtype),
                          belief_temperature=cfg.belief_temperature, repeat_guesses=cfg.repeat_guesses)
