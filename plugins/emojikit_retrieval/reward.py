"""The `similarity` reward: MiniLM cosine between the judge's final guess and the target,
plus a success bonus and penalties for turns used, invalid format and repeated emoji.

    total = similarity_weight * similarity + listener_weight * listener + success_bonus
            - turn_penalty - format_penalty - repetition_penalty

  similarity          of the last turn's guess ("" scores 0); similarity_weight scales it in the
                      total (the breakdown keeps the plain similarity)
  listener            the judge's belief in the target after the last turn (a `TargetBelief`
                      judge: log p, floored at listener_floor), as 1 + max(log p, floor) / |floor|:
                      1 when the judge is certain, 0 at or below e**floor or for a judge without
                      beliefs. It moves with every emoji, also when the guess stays wrong.
  success_bonus       success_bonus * success_decay**(k-1) if the last turn reached
                      success_threshold on turn k, else 0
  turn_penalty        turn_penalty * turns used
  format_penalty      format_penalty * turns that failed the decoder's check
  repetition_penalty  repetition_penalty * mean over turns of the share of repeated emoji in
                      the turn (by emojis.base: variation selectors, ZWJ, skin tones ignored)
"""

from __future__ import annotations

from typing import Sequence

from pydantic import Field

from emojikit.api import emojis
from emojikit.api.components import BuildContext, Episode
from emojikit.api.config import ConfigModel


class SimilarityConfig(ConfigModel):
    success_threshold: float = Field(
        0.85,
        gt=0,
        le=1,
        description="A guess at least this similar ends the episode as a success. Exact retrieval scores 1.0; a message of the "
        "`generated` source and its nearest other message score 0.60 (median) and 0.79 (90th percentile).",
    )
    similarity_weight: float = Field(
        1.0, ge=0, description="Weight of the final guess's similarity in the total; 0 rewards only success (and the penalties), "
        "so episodes that all miss teach nothing instead of teaching near misses."
    )
    listener_weight: float = Field(
        0.0, ge=0, description="Weight of the judge's belief in the target (`listener`, 0..1) in the total; 0 leaves it out."
    )
    listener_floor: float = Field(-8.0, lt=0, description="log p(target) below this counts as this (listener 0).")
    success_bonus: float = Field(1.0, ge=0, description="Added on success.")
    success_decay: float = Field(0.5, ge=0, le=1, description="The bonus is multiplied by this for every turn after the first.")
    turn_penalty: float = Field(0.05, ge=0, description="Subtracted per turn used.")
    format_penalty: float = Field(0.5, ge=0, description="Subtracted per turn that was not valid emoji (possible without the mask).")
    repetition_penalty: float = Field(0.5, ge=0, description="Times the mean share of repeated base emoji per turn.")


def repeated_share(text: str) -> float:
    """Share of emoji in text whose base already occurred earlier in it: 🍕🍕🍕🎉 -> 0.5."""
    bases = [emojis.base(e) for e in emojis.split(text)]
    return 0.0 if not bases else (len(bases) - len(set(bases))) / len(bases)


class SimilarityReward:
    def __init__(self, cfg: SimilarityConfig = SimilarityConfig(), minilm=None):
        self.cfg = cfg
        self.success_threshold = cfg.success_threshold
        self.uses_target_belief = cfg.listener_weight > 0  # the loop then requires a TargetBelief judge
        self._minilm = minilm

    @property
    def minilm(self):
        if self._minilm is None:
            from emojikit.play.embedding import get_minilm

            self._minilm = get_minilm()
        return self._minilm

    def similarity(self, targets: Sequence[str], guesses: Sequence[str]) -> list[float]:
        """One embedding batch for every non-trivial pair; MiniLM caches per text, so repeated
        targets are embedded once per run."""
        if len(targets) != len(guesses):
            raise ValueError("similarity needs as many guesses as targets")
        out = [0.0] * len(targets)
        todo = []
        for i, (t, g) in enumerate(zip(targets, guesses)):
            if not g.strip():
                continue  # no guess: 0
            if g.strip() == t.strip():
                out[i] = 1.0  # exact, without float error below the threshold
            else:
                todo.append(i)
        if todo:
            sims = self.minilm.pair_similarity([targets[i] for i in todo], [guesses[i] for i in todo])
            for i, s in zip(todo, sims):
                out[i] = max(-1.0, min(1.0, float(s)))
        return out

    def score(self, episodes: Sequence[Episode]) -> list[dict[str, float]]:
        c = self.cfg
        out = []
        for ep in episodes:
            n = len(ep.turns)
            sim = ep.turns[-1].similarity if n else 0.0
            success = n > 0 and sim >= c.success_threshold
            logprob = ep.turns[-1].target_logprob if n else None
            breakdown = {
                "similarity": sim,
                "listener": 1.0 + max(logprob, c.listener_floor) / -c.listener_floor if logprob is not None else 0.0,
                "success": float(success),
                "turns": float(n),
                "success_bonus": c.success_bonus * c.success_decay ** (n - 1) if success else 0.0,
                "turn_penalty": c.turn_penalty * n,
                "format_penalty": c.format_penalty * sum(not t.valid for t in ep.turns),
                "repetition_penalty": c.repetition_penalty * (sum(repeated_share(t.emoji) for t in ep.turns) / n if n else 0.0),
            }
            breakdown["total"] = (
                c.similarity_weight * breakdown["similarity"]
                + c.listener_weight * breakdown["listener"]
                + breakdown["success_bonus"]
                - breakdown["turn_penalty"]
                - breakdown["format_penalty"]
                - breakdown["repetition_penalty"]
            )
            out.append(breakdown)
        return out


def build(cfg: SimilarityConfig, ctx: BuildContext) -> SimilarityReward:
    return SimilarityReward(cfg)
