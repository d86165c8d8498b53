"""Talking to the sender by hand: `emojikit chat` and `emojikit play --human`.

Both read one line at a time from a text stream (a terminal or a pipe; EOF ends the
session) and answer through the decoder, so every reply is emoji. Components come from a
recipe's tables when there is one (recipes/grpo.toml by default), from the registry's
defaults otherwise.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence, TextIO

from emojikit.components import Episode, EpisodeTurn, Message
from emojikit.errors import ConfigError, InputFileError
from emojikit.game import GameSettings, sender_prompt
from emojikit.policy import ChatMessages, SamplingParams

DEFAULTS = {"backend": "local", "decoder": "emoji-mask", "reward": "similarity", "prompts": "generated"}
HISTORY_EXCHANGES = 4  # chat: earlier (message, emoji) pairs the sender still sees

Echo = Callable[[str], None]


@dataclasses.dataclass
class Parts:
    """Built components by recipe table, and the game settings (the recipe's or the defaults)."""

    components: dict[str, Any]
    game: GameSettings

    def __getitem__(self, table: str) -> Any:
        return self.components[table]


def _validated(spec, data: dict, label: str):
    from pydantic import ValidationError

    try:
        return spec.config.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'settings'}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"{label}: {problems}") from None


def build_parts(
    recipe_path: Optional[Path],
    tables: Sequence[str],
    *,
    choices: Optional[dict[str, Optional[str]]] = None,
    overrides: Sequence[str] = (),
    settings: Optional[dict[str, dict]] = None,
    seed: int = 0,
) -> Parts:
    """Build the components of `tables`.

    A `choices` entry (e.g. --decoder none) selects that component with its default config,
    replacing the recipe's table; otherwise the recipe's table is used, and a table the
    recipe lacks gets the registry default (DEFAULTS). `settings[table]` changes single
    config fields after that (e.g. the decoder's max_emoji), validated by the component.
    """
    from emojikit.components import BuildContext
    from emojikit.recipe import COMPONENT_TABLES, load_recipe
    from emojikit.registry import get_registry

    choices, settings = dict(choices or {}), dict(settings or {})
    recipe = None
    if recipe_path is not None:
        recipe = load_recipe(recipe_path, list(overrides))
    elif overrides:
        raise ConfigError("--set needs a recipe (--recipe PATH)")
    registry = get_registry()
    ctx = BuildContext(seed=recipe.seed if recipe else seed, recipe_path=recipe.path if recipe else None)
    built: dict[str, Any] = {}
    for table in tables:
        if choices.get(table) or recipe is None or not recipe.has(table):
            spec = registry.get(COMPONENT_TABLES[table], choices.get(table) or DEFAULTS[table])
            data: dict = {}
        else:
            choice = recipe.components[table]
            spec, data = choice.spec, choice.config.model_dump()
        label = f"[{table}] {spec.name}"
        for key in settings.get(table, {}):
            if key not in spec.config.model_fields:
                raise ConfigError(f"{label}: has no {key} setting")
        config = _validated(spec, {**data, **settings.get(table, {})}, label)
        if spec.preflight is not None:
            spec.preflight(config, ctx)
        built[table] = spec.factory(config, ctx)
    game = recipe.settings.get("game") if recipe else None
    return Parts(built, game or GameSettings())


def default_recipe(recipe_path: Optional[Path]) -> Optional[Path]:
    """The given recipe, else recipes/grpo.toml when run from a checkout, else None."""
    if recipe_path is None and Path("recipes/grpo.toml").exists():
        return Path("recipes/grpo.toml")
    return recipe_path


def check_checkpoint(checkpoint: Optional[str]) -> Optional[str]:
    """The checkpoint directory to load, None for the start model ("base"); checked before
    any model loads."""
    if checkpoint in (None, "", "base"):
        return None
    if not Path(checkpoint).is_dir():
        raise InputFileError(f"--checkpoint {checkpoint}: not a checkpoint directory (or \"base\")")
    from emojikit.preflight import check_checkpoint_files

    check_checkpoint_files(checkpoint)  # a damaged file is named before any model loads
    return str(checkpoint)


def load_checkpoint(policy, checkpoint: Optional[str]) -> None:
    """Load a sender checkpoint; None or "base" keeps the start model."""
    if (path := check_checkpoint(checkpoint)) is not None:
        policy.load(path, with_optimizer=False)


def read_lines(stream: TextIO, prompt: str, interactive: bool) -> Iterator[str]:
    """Non-empty stripped lines until EOF; the prompt is shown only on a terminal."""
    import click

    while True:
        if interactive:
            click.echo(prompt, nl=False)
        line = stream.readline()
        if not line:
            return
        if line.strip():
            yield line.strip()


def _is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


# --- chat ------------------------------------------------------------------------------------


def chat_system_prompt(min_emoji: int, max_emoji: int) -> str:
    """The SFT system prompt (what a fine-tuned sender has seen), with the decoder's limits."""
    from emojikit.data import SYSTEM_PROMPT

    return SYSTEM_PROMPT.replace("2 to 8", f"{min_emoji} to {max_emoji}")


def chat_messages(system: str, history: Sequence[tuple[str, str]], line: str) -> ChatMessages:
    messages: ChatMessages = [{"role": "system", "content": system}] if system else []
    for said, answered in history[-HISTORY_EXCHANGES:]:
        messages += [{"role": "user", "content": said}, {"role": "assistant", "content": answered}]
    return messages + [{"role": "user", "content": line}]


def chat(
    parts: Parts,
    stream: TextIO,
    *,
    temperature: float = 0.7,
    seed: Optional[int] = None,
    echo: Echo = print,
    interactive: Optional[bool] = None,
) -> list[tuple[str, str]]:
    """Answer each line of `stream` with emoji through the decoder until EOF.

    `/reset` forgets the conversation, `/quit` ends it. Returns the (line, emoji) pairs.
    """
    policy, decoder = parts["backend"], parts["decoder"]
    lo, hi = getattr(decoder, "min_emoji", 2), getattr(decoder, "max_emoji", 8)
    system = chat_system_prompt(lo, hi)
    # Room for the longest emoji sequences (several tokens each) within the decoder's count.
    max_tokens = max(parts.game.max_new_tokens, 4 * hi)
    interactive = _is_tty(stream) if interactive is None else interactive
    if interactive:
        echo(f"Chat in emoji ({lo}-{hi} per answer). /reset forgets the conversation, /quit or Ctrl-D ends it.")
    history: list[tuple[str, str]] = []
    said: list[tuple[str, str]] = []
    for number, line in enumerate(read_lines(stream, "you> ", interactive)):
        if line == "/quit":
            break
        if line == "/reset":
            history.clear()
            echo("(conversation forgotten)")
            continue
        params = SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=None if seed is None else seed + number)
        ((sample, *_),) = policy.sample([chat_messages(system, history, line)], 1, params, decoder)
        answer = sample.text.strip()
        ok = decoder.check(answer).valid if decoder is not None else True
        echo(f"emoji> {answer}" + ("" if ok else "  (not valid emoji)"))
        history.append((line, answer))
        said.append((line, answer))
    return said


# --- play --human ----------------------------------------------------------------------------


def pick_target(parts: Parts, message: Optional[str], seed: int) -> Message:
    """--message, or a random message of the prompt source (the same choice `play` makes)."""
    if message is not None:
        if not message.strip():
            raise ConfigError("--message is empty")
        return Message(message.strip(), "cli")
    source = parts.components.get("prompts")
    if source is None:
        raise ConfigError("no prompt source to draw a message from: pass --message TEXT")
    pool = list(source.messages(512))
    if not pool:
        raise ConfigError("the prompt source gave no messages: pass --message TEXT")
    return random.Random(seed).choice(pool)


def human_play(
    parts: Parts,
    target: Message,
    stream: TextIO,
    *,
    temperature: float = 0.7,
    seed: Optional[int] = None,
    echo: Echo = print,
    interactive: Optional[bool] = None,
) -> Episode:
    """The person is the guesser: the sender sends emoji for a hidden target, each line of
    `stream` is a guess scored with the reward's similarity; after a miss the sender sees the
    guess (as in the game) and sends more emoji. Ends on success, after max_turns, or at EOF.
    """
    policy, decoder, reward, game = parts["backend"], parts["decoder"], parts["reward"], parts.game
    interactive = _is_tty(stream) if interactive is None else interactive
    episode = Episode(target=target.text, category=target.category)
    guesses = read_lines(stream, "your guess> ", interactive)
    echo(f"Guess the message from the emoji: {game.max_turns} turns, success at similarity {reward.success_threshold:.2f}.")
    for turn_index in range(game.max_turns):
        params = SamplingParams(max_tokens=game.max_new_tokens, temperature=temperature, seed=None if seed is None else seed + turn_index)
        ((sample, *_),) = policy.sample([sender_prompt(game, target.text, episode.turns)], 1, params, decoder)
        valid = decoder.check(sample.text).valid if decoder is not None else True
        echo(f"turn {turn_index + 1}/{game.max_turns}   model  {sample.text}" + ("" if valid else "  (not valid emoji)"))
        guess = next(guesses, None)
        if guess is None:
            echo("(no more guesses)")
            break
        (similarity,) = reward.similarity([target.text], [guess])
        episode.turns.append(EpisodeTurn(emoji=sample.text, valid=valid, guess=guess, similarity=float(similarity), sample=sample))
        episode.success = float(similarity) >= reward.success_threshold
        best = max(t.similarity for t in episode.turns)
        verdict = "  -> success!" if episode.success else ""
        echo(f'            you    "{guess}"  similarity {similarity:.3f}  (best {best:.3f}, turn {turn_index + 1} of {game.max_turns}){verdict}')
        if episode.success:
            break
    if episode.turns:
        (breakdown,) = reward.score([episode])
        episode.reward = dict(breakdown)
    echo(f"message  {target.text}")
    echo(score_line(episode))
    return episode


def score_line(episode: Episode) -> str:
    best = max((t.similarity for t in episode.turns), default=0.0)
    outcome = f"success on turn {len(episode.turns)}" if episode.success else "no success"
    total = f"; reward {episode.reward['total']:.3f}" if "total" in episode.reward else ""
    return f"score    {outcome}; turns used {len(episode.turns)}; best similarity {best:.3f}{total}"


# --- entry points of the CLI commands ------------------------------------------------------


def run_chat(
    recipe_path: Optional[Path],
    *,
    checkpoint: Optional[str],
    backend: Optional[str] = None,
    decoder: Optional[str] = None,
    overrides: Sequence[str] = (),
    max_emoji: Optional[int] = None,
    temperature: float = 0.7,
    seed: Optional[int] = None,
    stream: TextIO,
    echo: Echo = print,
) -> list[tuple[str, str]]:
    """`emojikit chat`: build the sender and decoder, load the checkpoint, chat until EOF."""
    check_checkpoint(checkpoint)
    settings = {}
    if max_emoji is not None:
        settings["decoder"] = {"max_emoji": max_emoji, **({"min_emoji": max_emoji} if max_emoji < 2 else {})}
    parts = build_parts(
        default_recipe(recipe_path), ["backend", "decoder"], choices={"backend": backend, "decoder": decoder},
        overrides=overrides, settings=settings, seed=seed or 0,
    )
    load_checkpoint(parts["backend"], checkpoint)
    return chat(parts, stream, temperature=temperature, seed=seed, echo=echo)


def run_human_play(
    recipe_path: Optional[Path],
    *,
    message: Optional[str],
    checkpoint: Optional[str],
    choices: Optional[dict[str, Optional[str]]] = None,
    overrides: Sequence[str] = (),
    max_turns: Optional[int] = None,
    temperature: float = 0.7,
    seed: Optional[int] = None,
    stream: TextIO,
    echo: Echo = print,
) -> Episode:
    """`emojikit play --human`: build sender, decoder, reward (and a prompt source when no
    --message is given), then let the person guess."""
    check_checkpoint(checkpoint)
    seed = random.randrange(2**31) if seed is None else seed
    recipe_path = default_recipe(recipe_path)
    overrides = list(overrides)
    tables = ["backend", "decoder", "reward"] + ([] if message is not None else ["prompts"])
    if max_turns is not None and recipe_path is not None:
        overrides.append(f"game.max_turns={max_turns}")
    parts = build_parts(recipe_path, tables, choices=choices, overrides=overrides, seed=seed)
    if max_turns is not None and recipe_path is None:
        parts.game = parts.game.model_copy(update={"max_turns": max_turns})
    load_checkpoint(parts["backend"], checkpoint)
    target = pick_target(parts, message, seed)
    return human_play(parts, target, stream, temperature=temperature, seed=seed, echo=echo)
