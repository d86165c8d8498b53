"""The multi-turn retrieval game: the sender sends emoji, the judge guesses, similarity decides.

An episode has a target message. Each turn the sender (a Policy under a decoder) answers
with emoji; the judge, seeing every emoji turn so far and its own earlier guesses, guesses
the message; the reward scores guess against target. The episode ends when the similarity
reaches `reward.success_threshold` or after `max_turns`. After a miss the sender sees the
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

from emojikit import emojis
from emojikit.components import Episode, EpisodeTurn, JudgeView, Message
from emojikit.config import ConfigModel
from emojikit.data import SYSTEM_PROMPT as SFT_SYSTEM_PROMPT
from emojikit.policy import ChatMessages, SamplingParams

# The first turn is exactly an SFT example (same system prompt, the bare message), so a
# sender fine-tuned by recipes/sft.toml starts GRPO on the distribution it was trained on.
DEFAULT_SYSTEM = SFT_SYSTEM_PROMPT
DEFAULT_FIRST_TURN = "{target}"
DEFAULT_FOLLOW_UP = (
    'The guesser read your emoji as: "{guess}"\n'
    "The message is still: {target}\n"
    "Send 2-8 more emoji to correct the guess."
)

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


def sender_prompt(settings: GameSettings, target: str, turns: Sequence[EpisodeTurn]) -> ChatMessages:
    """The sender's conversation before its next turn: its earlier emoji as assistant turns,
    each judge guess in the following user turn (which restates the target)."""
    messages: ChatMessages = []
    if settings.system_prompt:
        messages.append({"role": "system", "content": settings.system_prompt})
    messages.append({"role": "user", "content": settings.first_turn.format(target=target)})
    for number, turn in enumerate(turns, start=1):
        messages.append({"role": "assistant", "content": turn.emoji})
        follow = settings.follow_up.format(
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


def _format_ok(decoder: Any, text: str) -> bool:
    if decoder is None:
        return emojis.is_emoji_only(text, 2, 8)
    return bool(decoder.check(text).valid)


TurnCallback = Callable[[int, list[Episode]], None]


def play(
    policy: Any,
    decoder: Any,
    judge: Any,
    reward: Any,
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
    A judge with `add_candidates` (the retrieval judge) is given the targets first.
    """
    settings = settings or GameSettings()
    if group_size < 1:
        raise ValueError("group_size must be at least 1")
    episodes = [Episode(target=m.text, category=m.category) for m in targets for _ in range(group_size)]
    if hasattr(judge, "add_candidates"):
        judge.add_candidates(list(dict.fromkeys(m.text for m in targets)))

    live = list(episodes)
    for turn_index in range(settings.max_turns):
        if not live:
            break
        seed = None if sampling.seed is None else sampling.seed + turn_index
        params = dataclasses.replace(sampling, max_tokens=settings.max_new_tokens, seed=seed)
        prompts = [sender_prompt(settings, ep.target, ep.turns) for ep in live]
        samples = policy.sample(prompts, 1, params, decoder)
        if len(samples) != len(live):
            raise RuntimeError(f"policy.sample returned {len(samples)} sample lists for {len(live)} prompts")
        for ep, (sample, *_) in zip(live, samples):
            ep.turns.append(EpisodeTurn(emoji=sample.text, valid=_format_ok(decoder, sample.text), sample=sample))

        guesses = judge.guess([judge_view(ep) for ep in live])
        if len(guesses) != len(live):
            raise RuntimeError(f"judge returned {len(guesses)} guesses for {len(live)} episodes")
        # None: a remote judge gave up on this view after its retries; the episode ends failed.
        answered = [(ep, guess) for ep, guess in zip(live, guesses) if guess is not None]
        for ep, guess in zip(live, guesses):
            ep.failed = guess is None
        similarities = reward.similarity([ep.target for ep, _ in answered], [g for _, g in answered]) if answered else []
        for (ep, guess), sim in zip(answered, similarities):
            ep.turns[-1].guess = guess
            ep.turns[-1].similarity = float(sim)
            ep.success = float(sim) >= reward.success_threshold

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


# --- watch mode (`emojikit play`) ------------------------------------------------------------

WATCH_DEFAULTS = {"backend": "local", "decoder": "emoji-mask", "judge": "retrieval", "reward": "similarity", "prompts": "generated"}


def _watch_components(recipe_path, choices: dict[str, Optional[str]], overrides: list[str], max_turns: Optional[int], seed: int):
    """(components by table, game settings): from the recipe when there is one, with --judge
    etc. replacing whole tables; otherwise every component from the registry with its defaults."""
    import json

    from emojikit.components import BuildContext
    from emojikit.errors import ConfigError
    from emojikit.recipe import COMPONENT_TABLES, load_recipe
    from emojikit.registry import get_registry

    if recipe_path is not None:
        extra = list(overrides) + [f"{t}={{ use = {json.dumps(n)} }}" for t, n in choices.items() if n]
        if max_turns is not None:
            extra.append(f"game.max_turns={max_turns}")
        recipe = load_recipe(recipe_path, extra)
        if "game" not in recipe.settings:
            raise ConfigError(f"{recipe_path}: a {recipe.kind} recipe has no game; use a grpo or eval recipe")
        built = {t: recipe.build(t) if recipe.has(t) else None for t in WATCH_DEFAULTS}
        return built, recipe.settings["game"]
    if overrides:
        raise ConfigError("--set needs a recipe (--recipe PATH)")
    registry, ctx, built = get_registry(), BuildContext(seed=seed), {}
    for table, default in WATCH_DEFAULTS.items():
        spec = registry.get(COMPONENT_TABLES[table], choices.get(table) or default)
        config = spec.config()
        if spec.preflight is not None:
            spec.preflight(config, ctx)
        built[table] = spec.factory(config, ctx)
    return built, GameSettings(**({"max_turns": max_turns} if max_turns is not None else {}))


def watch(
    recipe_path=None,
    *,
    message: Optional[str] = None,
    checkpoint: Optional[str] = None,
    choices: Optional[dict[str, Optional[str]]] = None,
    overrides: Sequence[str] = (),
    max_turns: Optional[int] = None,
    temperature: float = 0.7,
    seed: Optional[int] = None,
    echo: Callable[[str], None] = print,
) -> Episode:
    """Play one message with the sender and the judge, printing each turn as it happens."""
    import random

    seed = random.randrange(2**31) if seed is None else seed
    parts, settings = _watch_components(recipe_path, dict(choices or {}), list(overrides), max_turns, seed)
    policy = parts["backend"]
    if checkpoint:
        policy.load(str(checkpoint), with_optimizer=False)
    if message is None:
        if parts["prompts"] is None:
            from emojikit.errors import ConfigError

            raise ConfigError("no prompt source to draw a message from: pass --message TEXT")
        pool = list(parts["prompts"].messages(512))
        target = random.Random(seed).choice(pool)
    else:
        target = Message(message, "cli")

    echo(f"message  {target.text}")

    def show(turn_number: int, episodes: list[Episode]) -> None:
        t = episodes[0].turns[-1]
        mark = "" if t.valid else "  (not valid emoji)"
        echo(f"turn {turn_number}   sender  {t.emoji}{mark}")
        verdict = "  -> success" if episodes[0].success else ""
        echo(f'         judge   "{t.guess}"  similarity {t.similarity:.3f}{verdict}')

    (episode,) = play(
        policy, parts["decoder"], parts["judge"], parts["reward"], [target],
        settings=settings, sampling=SamplingParams(temperature=temperature, seed=seed), on_turn=show,
    )
    outcome = f"success on turn {len(episode.turns)}" if episode.success else f"no success in {len(episode.turns)} turns"
    details = ", ".join(f"{k} {v:.3f}" for k, v in episode.reward.items() if k != "total")
    echo(f"result   {outcome}; reward {episode.reward.get('total', 0.0):.3f} ({details})")
    return episode
