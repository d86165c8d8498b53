"""Repair states of training targets, shared by the RFT and GRPO loops.

A run's states are made once, before any training: the start checkpoint plays the 2-turn game
at a low temperature on the TRAINING targets (never the held-out ones), and its first-turn
misses, each with the judge's wrong guess, are written to train_states.jsonl in the run
directory (the format of `emojikit repair-states`, read back by `repair.read_states`). A resumed
run reads the file again, so its states stay those of the start.

A turn-2 answer is scored as the game scores it after that miss: the judge reads [turn 1, the
answer] with its wrong guess behind it (repair.judge_turn2), and the reward scores the 2-turn
episode.
"""

from __future__ import annotations

from pathlib import Path

STATES_FILE = "train_states.jsonl"


def make_train_states(policy, decoder, judge, reward, targets, game, temperature: float, seed: int, path: Path, start: str, table: str = "rft") -> None:
    """The start checkpoint's first-turn misses on the training targets, written once to `path`
    in the repair-states format (a header line, then one state per line). `table` names the
    recipe table in the error of a start that missed nothing."""
    from tqdm import tqdm

    from emojikit.api.errors import ConfigError
    from emojikit.api.policy import SamplingParams
    from emojikit.evaluation.repair import STATES_FORMAT
    from emojikit.play.game import count_finished, play
    from emojikit.support.io import atomic_write_jsonl

    two_turns = game.model_copy(update={"max_turns": 2})
    sampling = SamplingParams(max_tokens=game.max_new_tokens, temperature=temperature, seed=seed)
    with tqdm(total=len(targets), desc="repair states", unit="episode") as bar:
        episodes = play(policy, decoder, judge, reward, targets, settings=two_turns, sampling=sampling, group_size=1, on_turn=count_finished(bar, 2))
    misses = [ep for ep in episodes if not ep.failed and len(ep.turns) == 2]
    if not misses:
        raise ConfigError(f"[{table}] states = \"repair\": the start ({start}) won the first turn on all {len(episodes)} training targets; no states to repair")
    header = {"repair_states": STATES_FORMAT, "sender": start, "targets": "training", "temperature": temperature, "seed": seed,
              "played": len(episodes), "states": len(misses), "own_repair_wins": sum(bool(ep.success) for ep in misses)}
    rows = [{"target": ep.target, "category": ep.category, "turn1": ep.turns[0].emoji, "guess": ep.turns[0].guess,
             "similarity": round(ep.turns[0].similarity, 4), "own_turn2": ep.turns[1].emoji} for ep in misses]
    atomic_write_jsonl(path, [header, *rows])


def train_states(policy, decoder, judge, reward, targets, game, temperature: float, seed: int, run_dir, start: str, table: str) -> list:
    """The run's repair states: made by `policy` (the start weights: call this before
    resume_policy loads a later checkpoint) when the run directory has none, then read back."""
    from emojikit.evaluation.repair import read_states

    path = run_dir.file(STATES_FILE)
    if not path.exists():
        make_train_states(policy, decoder, judge, reward, targets, game, temperature, seed, path, start, table)
    header, states = read_states(path)
    print(f"{len(states)} repair states: the start's first-turn misses on {header['played']} training targets ({path})")
    return states


def repair_episodes(states, answers: list[str], rows: list[dict], valid: list[bool], samples=None):
    """2-turn episodes after each state's miss, with the judged answer as turn 2 (for reward.score)."""
    from emojikit.api.components import Episode, EpisodeTurn

    episodes = []
    for j, (state, answer, row) in enumerate(zip(states, answers, rows)):
        turn1 = EpisodeTurn(emoji=state.turn1, valid=True, guess=state.guess, similarity=state.similarity)
        turn2 = EpisodeTurn(emoji=answer, valid=valid[j], guess=row["guess"] or "", similarity=row["similarity"], sample=samples[j] if samples else None)
        episodes.append(Episode(target=state.target, category=state.category, turns=[turn1, turn2], success=row["success"], failed=row["guess"] is None))
    return episodes


def sample_repairs(policy, decoder, judge, reward, states, game, sampling, k: int) -> list:
    """k 2-turn episodes per state, state by state: turn 1 is the state's miss (no sample: it
    never trains), turn 2 an answer sampled on the game's own turn-2 prompt and judged as the
    repair benchmark does. A judged episode's `reward` is reward.score's breakdown; one the
    judge gave up on is `failed`, with no reward."""
    from emojikit.api.format import format_of
    from emojikit.evaluation.repair import turn2_prompts

    prompts = turn2_prompts(game.model_copy(update={"max_turns": 2}), states, format_of(decoder))
    samples = [sample for group in policy.sample(prompts, k, sampling, decoder) for sample in group]
    flat_states = [state for state in states for _ in range(k)]
    return judged_repairs(decoder, judge, reward, flat_states, samples)


def judged_repairs(decoder, judge, reward, states, samples) -> list:
    """One 2-turn episode per (state, turn-2 sample), judged and scored as sample_repairs says."""
    from emojikit.api.format import format_of
    from emojikit.evaluation.repair import judge_turn2
    from emojikit.play.game import _format_ok

    fmt = format_of(decoder)
    answers = [sample.text for sample in samples]
    rows = judge_turn2(judge, reward, states, answers)
    valid = [_format_ok(decoder, fmt, a) for a in answers]
    episodes = repair_episodes(states, answers, rows, valid, samples)
    scored = [ep for ep in episodes if not ep.failed]
    for ep, breakdown in zip(scored, reward.score(scored) if scored else []):
        ep.reward = dict(breakdown)
    return episodes


def repeat_baselines(judge, reward, states) -> list[float]:
    """The reward of sending turn 1 again after each state's miss (inf where the judge gave up)."""
    from emojikit.evaluation.repair import judge_turn2

    answers = [state.turn1 for state in states]
    rows = judge_turn2(judge, reward, states, answers)
    episodes = repair_episodes(states, answers, rows, [True] * len(states))
    scored = iter(reward.score([ep for ep in episodes if not ep.failed]))
    return [float("inf") if ep.failed else float(next(scored)["total"]) for ep in episodes]  # an unjudged baseline keeps nothing
