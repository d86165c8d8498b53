"""The multi-turn retrieval game: the sender sends emoji, the judge guesses, similarity decides.

An episode has a target message. Each turn the sender (a Policy under a decoder) answers
with emoji; the judge, seeing every emoji turn so far and its own earlier guesses, guesses
the message; the reward scores guess against target. The episode ends when the similarity
reaches the reward's success threshold (`components.is_success`) or after `max_turns`. After a miss the sender sees the
guess in the next user turn and sends more emoji to correct it.

Play is batched per turn: every live episode's sender prompt goes into ONE `policy.sample`
call (n=1 per prompt), every live episode into ONE `judge.guess` call and ONE
`reward.similarity` call. A GRPO group is the same target repeated `group_size` times, so
the group members are independent episodes from the first turn on and all prompts of a
turn still share one call.
"""

from __future__ import annotations

import dataclasses
import string
from typing import Any, Callable, Optional, Sequence

from pydantic import Field, field_validator

from emojikit.api import emojis
from emojikit.api.components import (Decoder, Episode, EpisodeTurn, Judge, JudgeView, Message, Reward, add_candidates, guesses_of, is_success,
                                     similarities_of, target_logprobs)
from emojikit.api.config import ConfigModel
from emojikit.api.format import DEFAULT_FORMAT, EmojiFormat, format_of
from emojikit.api.policy import ChatMessages, Policy, SamplingParams

# The first turn is exactly an SFT example (same system prompt, the bare message), so a
# sender fine-tuned by recipes/sft.toml starts GRPO on the distribution it was trained on.
DEFAULT_SYSTEM = DEFAULT_FORMAT.system_prompt
DEFAULT_FIRST_TURN = "{target}"
DEFAULT_FOLLOW_UP = DEFAULT_FORMAT.follow_up

# Placeholders each template must contain, and those it may contain.
_TEMPLATE_FIELDS = {
    "first_turn": ({"target"}, {"target"}),
    "follow_up": ({"target", "guess"}, {"target", "guess", "turn", "turns_left"}),
}


def _placeholders(template: str) -> set[str]:
    try:
        return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as exc:  # unbalanced braces
        raise ValueError(f"not a valid template ({exc}); write literal braces as {{{{ and }}}}") from None


class GameSettings(ConfigModel):
    """The `[game]` recipe table."""

    max_turns: int = Field(3, ge=1, le=16, description="Turns per episode at most; an episode ends earlier on success.")
    max_new_tokens: int = Field(24, ge=1, description="Sender tokens per turn (overrides the sampling max_tokens).")
    system_prompt: str = Field(DEFAULT_SYSTEM, description="The sender's system prompt; empty for none.")
    first_turn: str = Field(DEFAULT_FIRST_TURN, description="The sender's first user turn; placeholder {target}.")
    follow_up: str = Field(
        DEFAULT_FOLLOW_UP,
        description="The user turn after a miss; placeholders {target} and {guess} (required), {turn} and {turns_left}.",
    )

    @field_validator("first_turn", "follow_up")
    @classmethod
    def _check_template(cls, value: str, info) -> str:
        required, allowed = _TEMPLATE_FIELDS[info.field_name]
        names = _placeholders(value)
        if "" in names or any(not n.isidentifier() for n in names):
            raise ValueError("placeholders must be named, e.g. {target}")
        if names - allowed:
            raise ValueError(f"unknown placeholder(s) {', '.join('{' + n + '}' for n in sorted(names - allowed))}; allowed: {', '.join('{' + n + '}' for n in sorted(allowed))}")
        if required - names:
            raise ValueError(f"missing placeholder(s) {', '.join('{' + n + '}' for n in sorted(required - names))}")
        return value


def sender_prompt(settings: GameSettings, target: str, turns: Sequence[EpisodeTurn], fmt: EmojiFormat = DEFAULT_FORMAT) -> ChatMessages:
    """The sender's conversation before its next turn: its earlier emoji as assistant turns,
    each judge guess in the following user turn (which restates the target).

    The system prompt and follow-up a recipe does not set are the format's (the decoder's
    limits), so a sender asked for 2-4 emoji is told 2-4."""
    system = settings.system_prompt if "system_prompt" in settings.model_fields_set else fmt.system_prompt
    follow_up = settings.follow_up if "follow_up" in settings.model_fields_set else fmt.follow_up
    messages: ChatMessages = []
    if system:
        messages.append({"role": "system", "content": system})
    messages.append({"role": "user", "content": settings.first_turn.format(target=target)})
    for number, turn in enumerate(turns, start=1):
        messages.append({"role": "assistant", "content": turn.emoji})
        follow = follow_up.format(
            target=target, guess=turn.guess, turn=number + 1, turns_left=settings.max_turns - number
        )
        messages.append({"role": "user", "content": follow})
    return messages


def judge_view(episode: Episode) -> JudgeView:
    """What the judge sees: only the emoji of each turn (words leaked into an unmasked,
    invalid turn never reach the judge), and its own earlier guesses."""
    return JudgeView(
        emoji_turns=["".join(emojis.split(t.emoji)) for t in episode.turns],
        guesses=[t.guess for t in episode.turns],
    )


def _format_ok(decoder: Any, fmt: EmojiFormat, text: str) -> bool:
    if decoder is None:
        return fmt.check(text)
    return bool(decoder.check(text).valid)


TurnCallback = Callable[[int, list[Episode]], None]


def count_finished(bar, max_turns: int) -> TurnCallback:
    """An `on_turn` that advances a progress bar (tqdm) by the episodes that ended this turn."""

    def on_turn(turn_number: int, live: list[Episode]) -> None:
        bar.update(sum(1 for ep in live if ep.success or ep.failed or turn_number == max_turns))

    return on_turn


def play(
    policy: Policy,
    decoder: Optional[Decoder],
    judge: Judge,
    reward: Reward,
    targets: Sequence[Message],
    *,
    settings: Optional[GameSettings] = None,
    sampling: SamplingParams = SamplingParams(),
    group_size: int = 1,
    on_turn: Optional[TurnCallback] = None,
) -> list[Episode]:
    """Play one episode per (target, group member), batched per turn, and score them.

    Returns len(targets) * group_size episodes, grouped: targets[0] x group_size first.
    Each turn keeps its `Sample` (prompt_tokens, tokens, logprobs) on `EpisodeTurn.sample`
    for building training datums; `episode.reward` holds `reward.score`'s breakdown.
    `sampling.max_tokens` is replaced by `settings.max_new_tokens`; a set seed is offset
    per turn so turns do not repeat each other's randomness. `on_turn(turn_number,
    episodes_played_this_turn)` is called after each turn (the watch mode prints there).
    A `CandidatePool` judge (the retrieval judge) is given the targets first; success is
    `components.is_success` (the reward's threshold, or the default one).
    """
    settings = settings or GameSettings()
    if group_size < 1:
        raise ValueError("group_size must be at least 1")
    episodes = [Episode(target=m.text, category=m.category) for m in targets for _ in range(group_size)]
    add_candidates(judge, list(dict.fromkeys(m.text for m in targets)))
    fmt = format_of(decoder)

    live = list(episodes)
    for turn_index in range(settings.max_turns):
        if not live:
            break
        seed = None if sampling.seed is None else sampling.seed + turn_index
        params = dataclasses.replace(sampling, max_tokens=settings.max_new_tokens, seed=seed)
        prompts = [sender_prompt(settings, ep.target, ep.turns, fmt) for ep in live]
        samples = policy.sample(prompts, 1, params, decoder)
        if len(samples) != len(live):
            raise RuntimeError(f"policy.sample returned {len(samples)} sample lists for {len(live)} prompts")
        for ep, (sample, *_) in zip(live, samples):
            ep.turns.append(EpisodeTurn(emoji=sample.text, valid=_format_ok(decoder, fmt, sample.text), sample=sample))

        guesses = guesses_of(judge, [judge_view(ep) for ep in live])  # one per episode, or one line naming the plugin
        # None: a remote judge gave up on this view after its retries; the episode ends failed.
        answered = [(ep, guess) for ep, guess in zip(live, guesses) if guess is not None]
        for ep, guess in zip(live, guesses):
            ep.failed = guess is None
        similarities = similarities_of(reward, [ep.target for ep, _ in answered], [g for _, g in answered]) if answered else []
        for (ep, guess), sim in zip(answered, similarities):
            ep.turns[-1].guess = guess
            ep.turns[-1].similarity = float(sim)
            ep.success = is_success(reward, sim)
        # The judge's belief in the target before this turn's guess joins its excluded guesses.
        views = [JudgeView(judge_view(ep).emoji_turns, [t.guess for t in ep.turns[:-1]]) for ep, _ in answered]
        for (ep, _), logprob in zip(answered, target_logprobs(judge, views, [ep.target for ep, _ in answered])):
            ep.turns[-1].target_logprob = logprob

        if on_turn is not None:
            on_turn(turn_index + 1, list(live))
        live = [ep for ep in live if not ep.success and not ep.failed]

    for ep, breakdown in zip(episodes, reward.score(episodes)):
        ep.reward = dict(breakdown)
    return episodes


def episode_to_json(ep: Episode) -> dict:
    """One row of episodes.jsonl; the turns' samples (token ids) stay out."""
    turns = []
    for t in ep.turns:
        row = {"emoji": t.emoji, "valid": t.valid, "guess": t.guess, "similarity": round(t.similarity, 4)}
        if t.target_logprob is not None:
            row["target_logprob"] = round(t.target_logprob, 4)
        if t.sample is not None:
            row["n_tokens"] = len(t.sample.tokens)
            row["stop_reason"] = t.sample.stop_reason
        turns.append(row)
    return {
        "target": ep.target,
        "category": ep.category,
        "success": ep.success,
        **({"failed": True} if ep.failed else {}),
        "n_turns": len(ep.turns),
        "reward": {k: round(float(v), 4) for k, v in ep.reward.items()},
        "turns": turns,
    }
