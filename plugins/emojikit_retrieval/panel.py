"""The `panel` judge: several pool readers read the same emoji, and their readings are combined
into one guess. It is the reward for RL against more than one reader, the defence against a
sender that learns one reader's quirks (an emoji whose keyword happens to match a message that
no other reader, and no person, would see in it).

Every reader scores each candidate message by the cosine between its reading of the emoji and
the message (see `RetrievalJudge`); the panel scores a candidate by the mean of those cosines
("mean": the consensus) or by the lowest of them ("min": a candidate wins only as far as the
least convinced reader allows). The guess is the best-scoring candidate; the panel's belief in
the target is the softmax of the combined scores, as for one reader. The readers share the
panel's pool: distractors are drawn once, by the panel, and every candidate goes to every reader.
"""

from __future__ import annotations

import warnings
from typing import Literal, Sequence

import numpy as np
from pydantic import Field, field_validator

from emojikit.api.components import BuildContext, JudgeView
from emojikit.api.errors import ConfigError, PluginError
from emojikit.composition.assembly import build_component, choose, context
from emojikit_retrieval.retrieval import RetrievalConfig, RetrievalJudge, draw_distractors
from emojikit_retrieval.retrieval import preflight as pool_preflight

COMBINE = ("mean", "min")


class PanelConfig(RetrievalConfig):
    readers: list[str] = Field(
        ["keywords", "retrieval"], min_length=1,
        description="The judges that read each turn, by name: pool readers (`retrieval`, `keywords` or a plugin's judge built on "
        "RetrievalJudge). Each is built with its own defaults and the panel's later_turn_weight, belief_temperature, repeat_guesses and encoder_dtype.",
    )
    combine: Literal["mean", "min"] = Field(
        "mean", description='How the readers\' cosines for a candidate combine: "mean" (consensus) or "min" (the least convinced reader).'
    )

    @field_validator("readers")
    @classmethod
    def _distinct_readers(cls, value: list[str]) -> list[str]:
        if "panel" in value:
            raise ValueError("a panel cannot hold a panel")
        if len(set(value)) != len(value):
            raise ValueError(f"each reader once: {', '.join(value)}")
        return value


class PanelJudge(RetrievalJudge):
    def __init__(self, readers: Sequence[RetrievalJudge], candidates: Sequence[str] = (), combine: str = "mean", **settings):
        if combine not in COMBINE:
            raise ValueError(f"combine: {combine!r}, expected one of {', '.join(COMBINE)}")
        self.readers = list(readers)
        self.combine = combine
        super().__init__((), **settings)
        self.add_candidates(candidates)

    def add_candidates(self, texts: Sequence[str]) -> None:
        super().add_candidates(texts)
        for reader in getattr(self, "readers", ()):  # RetrievalJudge.__init__ adds before the readers are set
            reader.add_candidates(texts)

    def turn_names(self, emoji_text: str) -> str:
        """What the panel shows of a turn (e.g. in episode logs): every reader's reading."""
        return " | ".join(reader.turn_names(emoji_text) for reader in self.readers)

    def _scores(self, views: Sequence[JudgeView]) -> tuple[np.ndarray, np.ndarray]:
        per_reader = [reader._scores(views) for reader in self.readers]
        scores_R_B_P = np.stack([scores for scores, _ in per_reader])
        readable_R_B = np.stack([readable for _, readable in per_reader])
        # A reader that cannot read a view (no keyword for its emoji, a reading without words)
        # scores every candidate 0: it abstains, or under "min" it would flatten the others' scores.
        voting_R_B_P = np.where(readable_R_B[:, :, None], scores_R_B_P, np.nan)
        readable_B = readable_R_B.any(axis=0)
        voting_R_B_P[:, ~readable_B] = scores_R_B_P[:, ~readable_B]  # nobody reads it: every score is 0 (or -inf)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a column of earlier guesses: -inf stays -inf
            combined_B_P = np.nanmean(voting_R_B_P, axis=0) if self.combine == "mean" else np.nanmin(voting_R_B_P, axis=0)
        # Earlier guesses are -inf for every reader alike, so both combinations keep them out.
        return np.where(np.isnan(combined_B_P), -np.inf, combined_B_P).astype(np.float32), readable_B


def not_a_pool_reader(name: str) -> str:
    return f"readers: `{name}` is not a pool reader; a panel combines the scores of pool readers (retrieval, keywords, lm-reader)"


def reader_settings(cfg: PanelConfig) -> dict:
    # The panel draws the distractors once; its readers hold exactly the panel's pool.
    return {"later_turn_weight": cfg.later_turn_weight, "belief_temperature": cfg.belief_temperature,
            "repeat_guesses": cfg.repeat_guesses, "encoder_dtype": cfg.encoder_dtype, "distractors": 0}


def preflight(cfg: PanelConfig, ctx: BuildContext) -> None:
    """Every reader is an installed pool reader that takes the shared settings, before any model loads."""
    registry = context(ctx).registry
    for name in cfg.readers:
        table = f"judge: readers: {name}"
        try:
            spec = registry.get("judge", name)
        except PluginError as exc:
            raise PluginError(f"[{table}] {exc}") from None
        if not issubclass(spec.config, RetrievalConfig):
            raise ConfigError(not_a_pool_reader(name))
        choose("judge", name, reader_settings(cfg), ctx, table=table)
    pool_preflight(cfg, ctx)


def build(cfg: PanelConfig, ctx: BuildContext) -> PanelJudge:
    preflight(cfg, ctx)
    shared = reader_settings(cfg)
    readers = []
    for name in cfg.readers:
        reader = build_component("judge", name, shared, ctx, table=f"judge: readers: {name}")
        if not isinstance(reader, RetrievalJudge):  # settings like a pool reader's, but it scores no pool
            raise ConfigError(not_a_pool_reader(name))
        readers.append(reader)
    return PanelJudge(readers, draw_distractors(cfg, ctx), combine=cfg.combine, minilm=readers[0].minilm,
                      later_turn_weight=cfg.later_turn_weight, belief_temperature=cfg.belief_temperature, repeat_guesses=cfg.repeat_guesses)
