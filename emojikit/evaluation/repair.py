"""The repair benchmark: fixed turn-1 states on which any sender plays turn 2 only.

`make_states` plays the 2-turn game once with one sender (the SFT, at the evaluation
temperature) on held-out targets and saves its first-turn misses: the target, the turn-1 emoji,
the judge's wrong guess and the sender's own turn 2. `evaluate_repair` replays those states
with every sender asked for (`emojikit eval --repair-states FILE`): the sender sees the same
conversation it would see in the game after that miss, the judge reads [turn 1, turn 2] with
its wrong guess behind it, and a state is won when the new guess reaches the success
threshold. Every table carries three baselines: the states' own sender's turn 2 (`own`),
resending turn 1 (`repeat`) and the lexicon repair teacher (`teacher:lexicon-repair`). Senders
are compared state by state: wins only one of them has, the difference with a bootstrap 95 %
interval over states, and the exact McNemar p of the discordant states.

The file's first line is a header (who made the states, the judge and its settings, the
candidate pool: every target of that game); each further line is one state.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from emojikit.api import emojis
from emojikit.api.components import RepairTeacher
from emojikit.support.io import atomic_write_jsonl, atomic_write_text

STATES_FORMAT = 1
OWN = "own"  # the turn 2 the states' own sender played when the file was made
REPEAT = "repeat"  # resend the turn-1 emoji
REPAIR_TEACHER = "teacher:lexicon-repair"  # emoji for the target's phrases the wrong guess misses
BASELINES = (OWN, REPEAT, REPAIR_TEACHER)
BOOTSTRAP_SAMPLES = 2000
STEM = "repair"


@dataclass
class RepairState:
    target: str
    category: str
    turn1: str  # the sender's turn-1 emoji
    guess: str  # the judge's wrong guess after turn 1
    similarity: float  # of that guess
    own_turn2: str  # the sender's own turn 2 in that game


# --- making the states --------------------------------------------------------------------


def resolve_sender(name: str) -> str:
    """A checkpoint reference as a backend loads it (a run directory stands for its final
    checkpoint); "base", teacher:NAME and the baselines as they are. One line for anything else."""
    from emojikit.api.errors import ConfigError, InputFileError
    from emojikit.stages.runs import resolve_checkpoint

    if name in ("base", *BASELINES) or name.startswith("teacher:"):
        return name
    try:
        return resolve_checkpoint(name)
    except InputFileError as exc:
        raise ConfigError(f"--checkpoint {exc} (or base, own, repeat, teacher:NAME)") from None


def build_sender(recipe, checkpoint: str, game, out_dir: Path):
    """A sender by name: a checkpoint or run directory, "base", or teacher:NAME (a teacher's answers)."""
    from emojikit.evaluation.evaluate import teacher_sender
    from emojikit.play.teacher_sender import TEACHER_PREFIX

    if checkpoint.startswith(TEACHER_PREFIX):
        return teacher_sender(recipe, checkpoint[len(TEACHER_PREFIX):], game, out_dir)
    if checkpoint == "base":
        return recipe.build("backend", out_dir)
    sender = recipe.build_player(out_dir)
    sender.load(resolve_sender(checkpoint), with_optimizer=False)
    return sender


def two_turn_game(recipe):
    return recipe.settings["game"].model_copy(update={"max_turns": 2})


def judge_settings(recipe) -> dict:
    """The judge's settings as the header records them (no field that could hold a secret)."""
    config = recipe.components["judge"].config
    dumped = config.model_dump(mode="json") if hasattr(config, "model_dump") else {}
    return {k: v for k, v in dumped.items() if not any(s in k.lower() for s in ("key", "token", "secret", "password"))}


def make_states(recipe, checkpoint: str, targets, path: Path, temperature: float, out_dir: Path) -> dict:
    """Play the 2-turn game with `checkpoint` on `targets`; write its first-turn misses to
    `path` (never over an existing file: states are made once); the header."""
    from tqdm import tqdm

    from emojikit.api.components import add_candidates
    from emojikit.api.errors import OutputError
    from emojikit.api.policy import SamplingParams
    from emojikit.play.game import count_finished, play

    path = Path(path)
    if path.exists():
        raise OutputError(f"{path}: already exists; repair states are made once and reused (choose another --out to make new ones)")
    game = two_turn_game(recipe)
    decoder, judge, reward = (recipe.build(kind, out_dir) for kind in ("decoder", "judge", "reward"))
    pool = list(dict.fromkeys(m.text for m in targets))
    add_candidates(judge, pool)
    sender = build_sender(recipe, checkpoint, game, out_dir)
    sampling = SamplingParams(max_tokens=game.max_new_tokens, temperature=temperature, seed=recipe.seed)
    with tqdm(total=len(targets), desc="repair states", unit="episode") as bar:
        episodes = play(sender, decoder, judge, reward, targets, settings=game, sampling=sampling, group_size=1, on_turn=count_finished(bar, game.max_turns))
    # A miss the judge answered on both turns; an episode the judge gave up on is no state.
    misses = [ep for ep in episodes if not ep.failed and len(ep.turns) == 2]
    if not misses:
        from emojikit.api.errors import ConfigError

        raise ConfigError(f"{checkpoint} won the first turn on all {len(episodes)} targets under judge "
                          f"`{recipe.components['judge'].spec.name}`: no states to repair; nothing written")
    header = {
        "repair_states": STATES_FORMAT, "sender": checkpoint, "judge": recipe.components["judge"].spec.name,
        "judge_settings": judge_settings(recipe), "temperature": temperature, "seed": recipe.seed,
        "played": len(episodes), "first_turn_wins": sum(bool(ep.success) and len(ep.turns) == 1 for ep in episodes),
        "states": len(misses), "own_repair_wins": sum(bool(ep.success) for ep in misses), "pool": pool,
    }
    rows = [{"target": ep.target, "category": ep.category, "turn1": ep.turns[0].emoji, "guess": ep.turns[0].guess,
             "similarity": round(ep.turns[0].similarity, 4), "own_turn2": ep.turns[1].emoji} for ep in misses]
    atomic_write_jsonl(path, [header, *rows])
    return header


def read_states(path: Path) -> tuple[dict, list[RepairState]]:
    """(header, states); a file that is not a states file is one line naming file:line."""
    from emojikit.api.errors import InputFileError
    from emojikit.support.io import read_jsonl_numbered

    rows = list(read_jsonl_numbered(path))
    if not rows or rows[0][1].get("repair_states") != STATES_FORMAT:
        raise InputFileError(f"{path}:1: not a repair states file (make one with: emojikit repair-states)")
    header = rows[0][1]
    states = []
    for number, row in rows[1:]:
        try:
            states.append(RepairState(str(row["target"]), str(row.get("category") or "unknown"), str(row["turn1"]), str(row["guess"]),
                                      float(row["similarity"]), str(row["own_turn2"])))
        except (KeyError, TypeError, ValueError) as exc:
            raise InputFileError(f"{path}:{number}: a state needs target, turn1, guess, similarity and own_turn2 ({exc})") from None
    if not states:
        raise InputFileError(f"{path}: no states (the sender won every first turn?)")
    return header, states


# --- turn 2 on the states -------------------------------------------------------------------


class StateAnswers:
    """A baseline that answers from the state itself: `own` (its recorded turn 2), `repeat` (turn 1)."""

    def __init__(self, field: str):
        self.field = field

    def turn2(self, states: Sequence[RepairState], prompts, params, decoder) -> list[str]:
        return [getattr(s, self.field) for s in states]


class RepairTeacherAnswers:
    """A teacher with `repair(targets, guesses, first_turns)`, e.g. `lexicon-repair`."""

    def __init__(self, teacher: RepairTeacher):
        self.teacher = teacher

    def turn2(self, states, prompts, params, decoder) -> list[str]:
        answers = self.teacher.repair([s.target for s in states], [s.guess for s in states], [s.turn1 for s in states])
        return [a or "" for a in answers]


class SenderAnswers:
    """A policy (or a TeacherSender) sampled on the game's own turn-2 prompt."""

    def __init__(self, sender):
        self.sender = sender

    def turn2(self, states, prompts, params, decoder) -> list[str]:
        return [group[0].text for group in self.sender.sample(prompts, 1, params, decoder)]


def answers_for(recipe, name: str, game, out_dir: Path):
    from emojikit.play.teacher_sender import TEACHER_PREFIX, TeacherSender

    if name == OWN:
        return StateAnswers("own_turn2")
    if name == REPEAT:
        return StateAnswers("turn1")
    if name.startswith(TEACHER_PREFIX):
        teacher = recipe.build_named("teacher", name[len(TEACHER_PREFIX):], Path(out_dir))
        if isinstance(teacher, RepairTeacher):
            return RepairTeacherAnswers(teacher)
        return SenderAnswers(TeacherSender(teacher, game))
    return SenderAnswers(build_sender(recipe, name, game, out_dir))


def turn2_prompts(game, states: Sequence[RepairState], fmt):
    from emojikit.api.components import EpisodeTurn
    from emojikit.play.game import sender_prompt

    return [sender_prompt(game, s.target, [EpisodeTurn(emoji=s.turn1, valid=True, guess=s.guess, similarity=s.similarity)], fmt) for s in states]


def judge_turn2(judge, reward, states: Sequence[RepairState], answers: Sequence[str]) -> list[dict]:
    """The judge reads [turn 1, turn 2] with its wrong guess behind it; one row per state."""
    from emojikit.api.components import JudgeView, guesses_of, is_success, similarities_of

    only_emoji = lambda text: "".join(emojis.split(text))
    views = [JudgeView(emoji_turns=[only_emoji(s.turn1), only_emoji(a)], guesses=[s.guess]) for s, a in zip(states, answers)]
    guesses = guesses_of(judge, views)
    answered = [i for i, g in enumerate(guesses) if g is not None]
    sims = dict(zip(answered, similarities_of(reward, [states[i].target for i in answered], [guesses[i] for i in answered]))) if answered else {}
    rows = []
    for i, (answer, guess) in enumerate(zip(answers, guesses)):
        sim = float(sims.get(i, 0.0))
        rows.append({"emoji": answer, "guess": guess, "similarity": round(sim, 4), "success": guess is not None and is_success(reward, sim)})
    return rows


def evaluate_repair(recipe, states_path: Path, senders: Sequence[str], temperature: float, out_dir: Path) -> dict:
    """Turn 2 on every state for the baselines and `senders`; per-sender rates and paired comparisons."""
    from emojikit.api.components import add_candidates
    from emojikit.api.errors import ConfigError
    from emojikit.api.format import format_of
    from emojikit.api.policy import SamplingParams
    from tqdm import tqdm

    header, states = read_states(states_path)
    for name in senders:
        resolve_sender(name)  # a wrong path fails before any model loads
    judge_name = recipe.components["judge"].spec.name
    if header.get("judge") != judge_name:
        raise ConfigError(f"{states_path}: the states were made with judge `{header.get('judge')}` (its wrong guesses); "
                          f"evaluate them with --judge {header.get('judge')}, or make states with judge `{judge_name}`")
    game = two_turn_game(recipe)
    decoder, judge, reward = (recipe.build(kind, out_dir) for kind in ("decoder", "judge", "reward"))
    add_candidates(judge, header.get("pool") or [s.target for s in states])
    fmt = format_of(decoder)
    prompts = turn2_prompts(game, states, fmt)
    # Turn 2 of the game: the seed the game gives its second turn.
    params = SamplingParams(max_tokens=game.max_new_tokens, temperature=temperature, seed=recipe.seed + 1)
    names = list(dict.fromkeys([*BASELINES, *senders]))
    results: dict = {"states_file": str(states_path), "states": len(states), "states_sender": header.get("sender"),
                     "judge": judge_name, "judge_settings": judge_settings(recipe), "temperature": temperature, "seed": recipe.seed,
                     "senders": {}, "paired": []}
    # One sampling call per sender, as before: splitting the states could change its seeded
    # draws. So the bar moves a sender at a time and prints each finished sender's rate.
    bar = tqdm(names, desc=f"repair benchmark ({len(states)} states)", unit="sender")
    for name in bar:
        bar.set_postfix_str(f"{name}: turn 2")
        answers = answers_for(recipe, name, game, out_dir).turn2(states, prompts, params, decoder)
        rows = judge_turn2(judge, reward, states, answers)
        wins = sum(r["success"] for r in rows)
        bar.write(f"{name}: repair rate {wins / len(states):.3f} ({wins}/{len(states)})", file=sys.stderr)
        results["senders"][name] = {
            "repair_rate": wins / len(states), "repair_wins": wins, "states": len(states),
            "similarity": sum(r["similarity"] for r in rows) / len(states),
            "format_violations": sum(not fmt.check(a) for a in answers) / len(states),
            "per_state": [{"target": s.target, **r} for s, r in zip(states, rows)],
        }
    wins_of = {name: [r["success"] for r in entry["per_state"]] for name, entry in results["senders"].items()}
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            results["paired"].append({"a": a, "b": b, **paired_comparison(wins_of[a], wins_of[b])})
    return results


# --- paired statistics ----------------------------------------------------------------------


def mcnemar_exact(a_only: int, b_only: int) -> float:
    """Two-sided exact McNemar p: the discordant states under Binomial(n, 1/2)."""
    n = a_only + b_only
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(a_only, b_only) + 1)) / 2**n
    return min(1.0, 2 * tail)


def paired_comparison(a_wins: Sequence[bool], b_wins: Sequence[bool], samples: int = BOOTSTRAP_SAMPLES, seed: int = 0) -> dict:
    """a - b on the same states: wins only a has, only b has, the difference of rates with a
    bootstrap 95 % interval over states, and the exact McNemar p."""
    import numpy as np

    a_S, b_S = np.asarray(a_wins, dtype=np.float64), np.asarray(b_wins, dtype=np.float64)
    diff_S = a_S - b_S
    rng = np.random.default_rng(seed)
    means_B = diff_S[rng.integers(len(diff_S), size=(samples, len(diff_S)))].mean(axis=1)
    low, high = np.quantile(means_B, [0.025, 0.975])
    a_only, b_only = int(((a_S == 1) & (b_S == 0)).sum()), int(((a_S == 0) & (b_S == 1)).sum())
    return {"a_only": a_only, "b_only": b_only, "difference": float(diff_S.mean()), "ci95": [float(low), float(high)],
            "mcnemar_p": mcnemar_exact(a_only, b_only)}


# --- reports --------------------------------------------------------------------------------


def repair_markdown(results: dict) -> str:
    settings = results.get("judge_settings", {})
    rule = " (repeat_guesses on: the judge may guess its wrong message again)" if settings.get("repeat_guesses") else ""
    lines = [f"Repair benchmark: {results['states']} first-turn misses of `{results['states_sender']}` from {results['states_file']}, "
             f"judge `{results['judge']}`{rule}, turn 2 only at temperature {results['temperature']}, seed {results['seed']}.", "",
             "| sender | repair rate | wins | mean similarity after turn 2 | format violations |", "|---|---|---|---|---|"]
    for name, entry in results["senders"].items():
        lines.append(f"| {name} | {entry['repair_rate']:.3f} | {entry['repair_wins']}/{entry['states']} | {entry['similarity']:.3f} | {entry['format_violations']:.3f} |")
    lines += ["", f"Paired, state by state ({OWN} = the states' own sender's turn 2, {REPEAT} = turn 1 sent again): "
              "difference of repair rates a - b [bootstrap 95 % interval over states], exact McNemar p.", "",
              "| a | b | a - b | 95 % interval | only a wins | only b wins | McNemar p |", "|---|---|---|---|---|---|---|"]
    for row in results["paired"]:
        lines.append(f"| {row['a']} | {row['b']} | {row['difference']:+.3f} | [{row['ci95'][0]:+.3f}, {row['ci95'][1]:+.3f}] | "
                     f"{row['a_only']} | {row['b_only']} | {row['mcnemar_p']:.3g} |")
    return "\n".join(lines) + "\n"


def write_repair_report(results: dict, out_dir: Path) -> str:
    table = repair_markdown(results)
    atomic_write_text(Path(out_dir) / f"{STEM}.json", json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    atomic_write_text(Path(out_dir) / f"{STEM}.md", table)
    return table


def states_targets(recipe, targets_file: Optional[Path], n: Optional[int], out_dir: Path):
    """The held-out targets the states are made on: a targets file (every row unless n), else
    n (default 512) messages of the recipe's prompt source."""
    from emojikit.play.targets import read_targets

    if targets_file is not None:
        return read_targets(targets_file, n)
    return list(recipe.build("prompts", out_dir).messages(n or 512))
