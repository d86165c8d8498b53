"""Per-emoji credit: how much each emoji of a turn moved the judge's belief in the target.

An emoji's credit is the judge's log-belief in the target after the whole turn minus the
same with that emoji left out: a difference reward, so raising an emoji's credit raises the
belief. Both sides are floored like the reward's listener term, so an emoji cannot earn
credit below a belief that counts as none. The emoji's tokens carry its credit on top of the
episode's advantage: within one answer, the emoji that pointed at the target are pushed up
and those that pointed away are pushed down, also when the whole answer missed and its
group-relative advantage is the same for every token. Needs a `TargetBelief` judge (the
retrieval judges) and a policy with a `tokenizer`.
"""

from __future__ import annotations

from typing import Optional, Sequence

from emojikit.api import emojis
from emojikit.api.components import Episode, JudgeView, target_logprobs
from emojikit.play.game import judge_view

FLOOR = -8.0  # as the similarity reward's listener_floor: a belief below e**-8 counts as none


def emoji_credits(episodes: Sequence[Episode], judge, floor: float) -> list[list[list[float]]]:
    """Per episode, per turn, per emoji of the turn: its leave-one-out credit (0 where the
    judge reported no belief). One judge call for every left-out view of the batch."""
    out = [[[0.0] * len(emojis.split(t.emoji)) for t in ep.turns] for ep in episodes]
    views, targets, where = [], [], []
    for e, ep in enumerate(episodes):
        for k, turn in enumerate(ep.turns):
            if turn.target_logprob is None:
                continue
            found = emojis.split(turn.emoji)
            earlier = judge_view(Episode(ep.target, turns=ep.turns[:k]))  # what the judge saw before this turn
            for i in range(len(found)):
                views.append(JudgeView(earlier.emoji_turns + ["".join(found[:i] + found[i + 1 :])], earlier.guesses))
                targets.append(ep.target)
                where.append((e, k, i))
    for (e, k, i), without in zip(where, target_logprobs(judge, views, targets) if views else []):
        full = episodes[e].turns[k].target_logprob
        out[e][k][i] = max(full, floor) - max(floor if without is None else without, floor)
    return out


def token_emoji_index(tokens: Sequence[int], tokenizer) -> list[Optional[int]]:
    """For each sampled token, the index of the emoji it helps spell; None for a token that
    adds no emoji character (end of turn, whitespace). A token that ends inside an emoji's
    bytes belongs to the emoji its bytes complete."""
    special = set(getattr(tokenizer, "all_special_ids", ()) or ())
    texts = [tokenizer.decode(list(tokens[: j + 1]), skip_special_tokens=True) for j in range(len(tokens))]
    counts = [len(emojis.split(text)) for text in texts]
    index: list[Optional[int]] = [None] * len(tokens)
    following: Optional[int] = None  # the emoji of the next token that has one
    for j in reversed(range(len(tokens))):
        before = texts[j - 1].rstrip("\ufffd") if j else ""
        added = texts[j][len(before) :]
        if tokens[j] in special:
            index[j] = None
        elif texts[j].endswith("\ufffd"):
            index[j] = following  # part of an emoji's bytes: the emoji they complete
        elif counts[j] > (counts[j - 1] if j else 0) or (counts[j] and added and not added.isspace()):
            index[j] = counts[j] - 1  # a new emoji, or a variation selector / ZWJ / skin tone on the last one
        following = index[j] if index[j] is not None else following
    return index


def token_credits(tokens: Sequence[int], tokenizer, credits_per_emoji: Sequence[float]) -> list[float]:
    """The credit each sampled token carries: its emoji's credit, 0 for the rest."""
    return [credits_per_emoji[i] if i is not None and i < len(credits_per_emoji) else 0.0 for i in token_emoji_index(tokens, tokenizer)]


class EmojiCredit:
    """The judge and tokenizer a GRPO step needs to turn emoji credits into token bonuses."""

    def __init__(self, judge, tokenizer, floor: float = FLOOR):
        self.judge, self.tokenizer, self.floor = judge, tokenizer, floor

    def token_bonus(self, episodes: Sequence[Episode], weight: float, baseline: str = "group") -> list[list[list[float]]]:
        """Per episode, per turn, per sampled token: weight times its emoji's credit, less the
        mean credit of every emoji the episodes sent (baseline "group", for a group's episodes)
        so an emoji is pushed up only if it helped more than the sender's typical emoji did."""
        credits = emoji_credits(episodes, self.judge, self.floor)
        if baseline == "group":
            flat = [c for per_turn in credits for per_emoji in per_turn for c in per_emoji]
            mean = sum(flat) / len(flat) if flat else 0.0
            credits = [[[c - mean for c in per_emoji] for per_emoji in per_turn] for per_turn in credits]
        return [
            [[weight * c for c in token_credits(t.sample.tokens, self.tokenizer, per_emoji)] if t.sample is not None else [] for t, per_emoji in zip(ep.turns, per_turn)]
            for ep, per_turn in zip(episodes, credits)
        ]
