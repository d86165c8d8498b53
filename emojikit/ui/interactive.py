"""Talking to the sender by hand: `emojikit chat`, `emojikit play` and `emojikit play --human`.

Both read one line at a time from a text stream (a terminal or a pipe; EOF ends the
session) and answer through the decoder, so every reply is emoji. Components come from a
recipe's tables when there is one (recipes/grpo.toml by default), from the registry's
defaults otherwise.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence, TextIO

from pydantic import ValidationError

from emojikit.composition.assembly import COMPONENT_TABLES, ComponentChoice, construct, context, preflight_errors
from emojikit.api.components import BuildContext, CandidatePool, Episode, EpisodeTurn, Message, add_candidates, is_success, similarities_of, success_threshold
from emojikit.api.config import for_playing
from emojikit.api.errors import ConfigError, EmojikitError, InputFileError
from emojikit.api.format import format_of
from emojikit.play.game import GameSettings, play, sender_prompt
from emojikit.api.policy import ChatMessages, SamplingParams
from emojikit.composition.recipe import choose_table, flag_sources, name_flags, read_toml, resolve_data, resolve_recipe_paths, validation_lines
from emojikit.composition.registry import Registry

# The component each table gets when neither the recipe nor a flag names one.
DEFAULTS = {"backend": "local", "decoder": "emoji-mask", "judge": "retrieval", "reward": "similarity", "prompts": "generated"}
HISTORY_EXCHANGES = 4  # chat: earlier (message, emoji) pairs the sender still sees

Echo = Callable[[str], None]


@dataclasses.dataclass
class Parts:
    """Built components by recipe table, and the game settings (the recipe's or the defaults)."""

    components: dict[str, Any]
    game: GameSettings
    choices: dict[str, ComponentChoice] = dataclasses.field(default_factory=dict)  # what each was built from

    def __getitem__(self, table: str) -> Any:
        return self.components[table]


# The flag behind each setting run_chat and run_human_play pass to build_parts, for its errors.
PLAY_FLAGS = {"decoder.max_emoji": "--max-emoji", "decoder.min_emoji": "--max-emoji", "game.max_turns": "--max-turns"}


def build_parts(
    recipe_path: Optional[Path],
    tables: Sequence[str],
    *,
    choices: Optional[Mapping[str, Optional[str]]] = None,
    overrides: Sequence[str] = (),
    settings: Optional[Mapping[str, Any]] = None,
    seed: int = 0,
    needs_game: bool = False,
    registry: Optional[Registry] = None,
) -> Parts:
    """Build the components of `tables` (and the [game] settings) through the assembly seam.

    Each table is the recipe's when there is a recipe with that table, else the registry
    default (DEFAULTS). Then, as for `emojikit run` (recipe.resolve_data): a `choices` entry
    (e.g. --judge claude) replaces the whole table, the `--set` overrides apply, and
    `settings` from other flags (e.g. {"decoder": {"max_emoji": 4}}) are merged. Only the
    tables used here are validated and preflighted, so a key another table needs does not
    stop `chat`. The build seed is the recipe's `seed` (or `seed` without a recipe).
    """
    raw = read_toml(Path(recipe_path)) if recipe_path is not None else {}
    if recipe_path is not None:  # relative paths of the file: the current directory, else the recipe's project root
        raw, _ = resolve_recipe_paths(raw, Path(recipe_path), registry)
    where = f"{recipe_path}: " if recipe_path is not None else ""
    if needs_game and recipe_path is not None and raw.get("kind") not in ("grpo", "rft", "eval"):
        raise ConfigError(f"{where}a {raw.get('kind')} recipe has no game; use a grpo, rft or eval recipe")
    data: dict[str, Any] = {"seed": raw.get("seed", 0) if recipe_path is not None else seed}
    for table in tables:
        data[table] = raw[table] if isinstance(raw.get(table), dict) else {"use": DEFAULTS[table]}
    data["game"] = raw.get("game", {}) if isinstance(raw.get("game", {}), dict) else {}
    data = resolve_data(data, overrides, choices=choices, settings=settings)

    errors = [f"[{key}]: not used here; tables: {', '.join(list(tables) + ['game'])}" for key in data if key not in (*tables, "game", "seed")]
    build_seed = data["seed"]
    if not isinstance(build_seed, int) or isinstance(build_seed, bool):
        errors.append(f"seed: expected an integer, got {build_seed!r}")
        build_seed = 0
    ctx = context(BuildContext(seed=build_seed, recipe_path=Path(recipe_path) if recipe_path is not None else None, registry=registry))
    picked: dict[str, ComponentChoice] = {}
    for table in tables:
        body = dict(data[table])
        use = body.pop("use", None) or DEFAULTS[table]
        try:
            picked[table] = choose_table(COMPONENT_TABLES[table], use, body, ctx, table=table)
        except EmojikitError as exc:
            errors.append(str(exc))
    try:
        game = GameSettings.model_validate(data["game"])
    except ValidationError as exc:
        errors.extend(validation_lines("game", GameSettings, exc))
        game = GameSettings()
    sources = flag_sources(overrides, choices, settings, PLAY_FLAGS)
    if errors:
        raise ConfigError(where + "; ".join(name_flags(errors, sources)))
    if "backend" in picked:  # it plays (a checkpoint, with its own adapter): the recipe's training placement does not apply
        picked["backend"] = dataclasses.replace(picked["backend"], config=for_playing(picked["backend"].config))
    errors = preflight_errors(picked.values(), ctx)
    if errors:
        raise ConfigError(where + "; ".join(name_flags(errors, sources)))
    return Parts({table: construct(choice, ctx) for table, choice in picked.items()}, game, picked)


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
    from emojikit.stages.runs import sender_checkpoint

    # A data run is named as one; a run directory means its final checkpoint, whose files are checked.
    return str(sender_checkpoint(checkpoint))


def default_sender(checkpoint: Optional[str], runs_root: Path = Path("runs"), say: Echo = print) -> str:
    """The checkpoint `chat` and `play` use: the one given, else the newest trained sender (the
    final checkpoint of an sft or grpo run under runs_root), else "base"; `say` names the choice."""
    if checkpoint:
        return checkpoint
    from emojikit.stages.runs import trained_senders

    senders = trained_senders(runs_root)
    if senders:
        say(f"emojikit: sender {senders[0]} (the newest trained checkpoint under {runs_root}/; --checkpoint base for the untrained model)")
        return str(senders[0])
    say(f"emojikit: sender: the untrained base model (no trained run under {runs_root}/ yet; pass --checkpoint to pick one)")
    return "base"


def load_checkpoint(policy, checkpoint: Optional[str]) -> None:
    """Load a sender checkpoint; None or "base" keeps the start model."""
    if (path := check_checkpoint(checkpoint)) is not None:
        policy.load(path, with_optimizer=False)


def read_lines(stream: TextIO, prompt: str, interactive: bool) -> Iterator[str]:
    """Non-empty stripped lines until EOF; the prompt is shown only on a terminal.

    Lines are read as bytes when the stream has them (sys.stdin does) and decoded here, so a
    line that is not UTF-8 is one InputFileError naming "stdin line N" whatever the locale's
    error handler (strict, or the surrogateescape of a C locale)."""
    import click

    raw = getattr(stream, "buffer", None)
    number = 0
    while True:
        if interactive:
            click.echo(prompt, nl=False)
        number += 1
        try:
            line = stream.readline() if raw is None else raw.readline().decode("utf-8")
        except UnicodeDecodeError as exc:  # exc.object is this line's bytes when decoded here
            where = f" (byte 0x{exc.object[exc.start]:02x} at column {exc.start + 1})" if raw is not None else ""
            raise InputFileError(f"stdin line {number}: not valid UTF-8{where}") from None
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
    fmt = format_of(decoder)
    # The SFT system prompt (what a fine-tuned sender has seen), with the decoder's limits.
    system = fmt.system_prompt
    # Room for the longest emoji sequences (several tokens each) within the decoder's count.
    max_tokens = max(parts.game.max_new_tokens, 4 * fmt.max_emoji)
    interactive = _is_tty(stream) if interactive is None else interactive
    if interactive:
        echo(f"Chat in emoji ({fmt.range_text} per answer). /reset forgets the conversation, /quit or Ctrl-D ends it.")
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
        ok = decoder.check(answer).valid if decoder is not None else fmt.check(answer)
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
    fmt = format_of(decoder)
    guesses = read_lines(stream, "your guess> ", interactive)
    echo(f"Guess the message from the emoji: {game.max_turns} turns, success at similarity {success_threshold(reward):.2f}.")
    for turn_index in range(game.max_turns):
        params = SamplingParams(max_tokens=game.max_new_tokens, temperature=temperature, seed=None if seed is None else seed + turn_index)
        ((sample, *_),) = policy.sample([sender_prompt(game, target.text, episode.turns, fmt)], 1, params, decoder)
        valid = decoder.check(sample.text).valid if decoder is not None else fmt.check(sample.text)
        echo(f"turn {turn_index + 1}/{game.max_turns}   model  {sample.text}" + ("" if valid else "  (not valid emoji)"))
        guess = next(guesses, None)
        if guess is None:
            echo("(no more guesses)")
            break
        (similarity,) = similarities_of(reward, [target.text], [guess])
        episode.turns.append(EpisodeTurn(emoji=sample.text, valid=valid, guess=guess, similarity=float(similarity), sample=sample))
        episode.success = is_success(reward, similarity)
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
    tables = ["backend", "decoder", "reward"] + ([] if message is not None else ["prompts"])
    settings = {"game": {"max_turns": max_turns}} if max_turns is not None else {}
    parts = build_parts(default_recipe(recipe_path), tables, choices=choices, overrides=overrides, settings=settings, seed=seed)
    load_checkpoint(parts["backend"], checkpoint)
    target = pick_target(parts, message, seed)
    return human_play(parts, target, stream, temperature=temperature, seed=seed, echo=echo)


# --- watch: `emojikit play` ------------------------------------------------------------------


def candidate_count(judge: Any) -> Optional[int]:
    """How many messages a pool judge (retrieval, keywords, ...) picks its guess from; None for
    a judge that writes its guess freely."""
    if not isinstance(judge, CandidatePool):
        return None
    candidates = getattr(judge, "candidates", None)
    return len(candidates) if isinstance(candidates, (list, tuple, dict, set)) else None


def judge_line(name: str, judge: Any) -> str:
    """What the judge guesses from: `play`'s line before the first turn."""
    n = candidate_count(judge)
    if n is None:
        return f"judge    {name} writes its guess freely (no list of candidates)"
    repeats = "" if getattr(judge, "repeat_guesses", True) else ", never the same one twice"
    others = f"{n - 1} other" + ("s" if n != 2 else "")
    return f"judge    {name} picks its guess from {n} messages: yours and {others}{repeats}"


def result_line(episode: Episode, max_turns: int, threshold: float, candidates: Optional[int]) -> str:
    """The outcome of a watched game in words: who won on which turn, out of how many
    candidates, and the reward's total (its parts: play --json)."""
    reward = f"; reward {episode.reward['total']:.2f}" if "total" in episode.reward else ""
    n = len(episode.turns)
    if not episode.turns:
        return f"result   no turn was played{reward}"
    last = episode.turns[-1]
    if episode.success:
        if candidates is not None and last.guess.strip() == episode.target.strip():
            how = f"the judge picked your message out of {candidates} candidates"
        else:
            how = f'the judge guessed "{last.guess}" (similarity {last.similarity:.2f}, success at {threshold:.2f})'
        return f"result   won on turn {n} of {max_turns}: {how}{reward}"
    if episode.failed:
        return f"result   the judge gave no guess on turn {n} (it failed after its retries){reward}"
    best = max(episode.turns, key=lambda t: t.similarity)
    return f'result   not guessed in {n} turn{"s" if n != 1 else ""}: the closest guess was "{best.guess}" (similarity {best.similarity:.2f}, success at {threshold:.2f}){reward}'


def watch(
    recipe_path: Optional[Path] = None,
    *,
    message: Optional[str] = None,
    checkpoint: Optional[str] = None,
    choices: Optional[Mapping[str, Optional[str]]] = None,
    overrides: Sequence[str] = (),
    max_turns: Optional[int] = None,
    temperature: float = 0.7,
    seed: Optional[int] = None,
    echo: Echo = print,
    as_json: bool = False,
) -> Episode:
    """Play one message with the sender and the judge, printing each turn as it happens (or,
    with `as_json`, one JSON object at the end: every turn and the reward's parts)."""
    import json

    from emojikit.play.game import episode_to_json

    check_checkpoint(checkpoint)
    seed = random.randrange(2**31) if seed is None else seed
    tables = ["backend", "decoder", "judge", "reward"] + ([] if message is not None else ["prompts"])
    settings = {"game": {"max_turns": max_turns}} if max_turns is not None else {}
    parts = build_parts(recipe_path, tables, choices=choices, overrides=overrides, settings=settings, seed=seed, needs_game=True)
    load_checkpoint(parts["backend"], checkpoint)
    target = pick_target(parts, message, seed)
    say = (lambda line: None) if as_json else echo
    judge, judge_name = parts["judge"], parts.choices["judge"].spec.name
    add_candidates(judge, [target.text])  # the game adds it too: here, so the pool size is the game's
    candidates = candidate_count(judge)
    say(f"message  {target.text}")
    say(judge_line(judge_name, judge))

    def show(turn_number: int, episodes: list[Episode]) -> None:
        t = episodes[0].turns[-1]
        mark = "" if t.valid else "  (not valid emoji)"
        say(f"turn {turn_number}   sender  {t.emoji}{mark}")
        verdict = "  -> success" if episodes[0].success else ""
        say(f'         judge   "{t.guess}"  similarity {t.similarity:.3f}{verdict}')

    (episode,) = play(
        parts["backend"], parts["decoder"], judge, parts["reward"], [target],
        settings=parts.game, sampling=SamplingParams(temperature=temperature, seed=seed), on_turn=show,
    )
    threshold = success_threshold(parts["reward"])
    if as_json:
        row = {"message": target.text, "checkpoint": checkpoint or "base", "judge": judge_name, "candidates": candidates,
               "max_turns": parts.game.max_turns, "success_threshold": threshold, "seed": seed, **episode_to_json(episode)}
        echo(json.dumps(row, ensure_ascii=False))
    else:
        echo(result_line(episode, parts.game.max_turns, threshold, candidates))
    return episode
