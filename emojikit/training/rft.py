"""Rejection-sampling fine-tuning (RFT; ReST / expert iteration) on the retrieval game.

The second RL method of the toolkit, written once against Policy (sample, forward_backward
with "cross_entropy", optim_step, save, load), so it runs on the local backend and on Tinker.
A round is:
  states (first turn: training targets; repair: cached first-turn misses of training targets)
  -> sample k answers per state under the decoder -> score each with the game's judge and
  reward -> keep (keep_answers) -> cross-entropy on the kept (prompt, answer) pairs for
  sft_steps optimizer steps -> metrics, checkpoint.

Repair states are made once per run, before any training, by the start checkpoint playing the
2-turn game at state_temperature on the TRAINING targets (never the held-out ones): its
first-turn misses, each with the judge's wrong guess (train_states.jsonl, the format of
`emojikit repair-states`). A repair answer is scored as the game scores it after that miss:
the judge reads [turn 1, the answer] with its wrong guess behind it (repair.judge_turn2), and
the reward scores the 2-turn episode.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal, Optional

from pydantic import Field, field_validator, model_validator

from emojikit.api.config import ConfigModel
from emojikit.training.repair_states import STATES_FILE, make_train_states, repair_episodes, repeat_baselines, sample_repairs, train_states  # noqa: F401 - shared with grpo's states = "repair"

METRICS_FILE = "metrics.jsonl"
EVAL_FILE = "eval.jsonl"
KEPT_FILE = "kept.jsonl"


class RFTSettings(ConfigModel):
    table_name: ClassVar[str] = "rft"  # named in the target-split errors (emojikit.play.targets)

    states: Literal["first_turn", "repair"] = Field(
        "repair", description='"first_turn": a state is a training target and its sender prompt; "repair": a cached first-turn miss '
        "of a training target (turn 1, the judge's wrong guess) and the prompt the game shows the sender after it; reward = the repair's own outcome."
    )
    rounds: int = Field(3, ge=1, description="Rounds of sample -> keep -> cross-entropy; a checkpoint after each (save_every).")
    states_per_round: int = Field(64, ge=1, description="States sampled each round, drawn in turn from the training states (an epoch is a permutation).")
    samples_per_state: int = Field(
        8, ge=0, description="Answers sampled per state (k) from the current policy under the decoder. 0 (first turn, with search = \"subset\" "
        "and a teacher): none; the search picks among the teacher's emoji alone, and its answer trains where it wins (baseline = \"none\")."
    )
    temperature: float = Field(1.0, gt=0, description="Sender temperature of the k samples: diversity is what rejection sampling selects from.")
    keep: Literal["best", "wins"] = Field(
        "best", description='"best": the state\'s highest-reward answer (the first sampled on a tie); "wins": every distinct answer '
        "that passes the threshold. Either way a kept answer also passes min_reward and beats the baseline."
    )
    min_reward: Optional[float] = Field(
        None, description="A kept answer's reward (the reward's total) is at least this; unset: the answer must win (the judge's guess "
        "reaches the reward's success threshold)."
    )
    baseline: Literal["mean", "repeat", "none"] = Field(
        "mean", description='A kept answer\'s reward is above: "mean" the mean of the state\'s k samples (a state whose answers all score '
        'alike teaches nothing); "repeat" (repair only) the reward of sending turn 1 again, the repair every sender has; "none": no baseline.'
    )
    search: Literal["none", "subset"] = Field(
        "none", description='First-turn states: "subset" adds one candidate per state, built from the emoji its k samples used: '
        "greedy forward selection (2..max_emoji of them, in the order chosen) by the judge's belief in the target (`TargetBelief`), "
        "the reader's own score, never its labels. The sender proposes the emoji, the reader picks the ones it reads; the keep rule decides."
    )
    search_min_emoji: Literal["format", "teacher"] = Field(
        "format", description='The fewest emoji a searched answer holds: "format" the decoder\'s min_emoji, after which the search stops '
        'when no emoji raises the belief (in a big pool it stops early, and short answers train); "teacher": as many as the teacher\'s '
        "answer to the state holds (needs a teacher), the search still picking which, and adding more while the belief rises."
    )
    teacher: Optional[str] = Field(
        None, description='Repair states: a teacher whose turn-2 answer joins each state\'s k samples as one more candidate (expert iteration '
        'with an expert), e.g. "lexicon-repair" (emoji for the target\'s phrases the wrong guess misses) or "lexicon". The keep rule still '
        "decides: its answer trains only where it wins and beats the baseline. An answer the decoder could not produce is left out (counted). "
        'First-turn states with search = "subset": the emoji of the teacher\'s answer (e.g. "lexicon") join the search\'s proposals; '
        "the reader picks among them and the samples' emoji, so what trains is what the reader reads, not the teacher's answer as it stands."
    )
    sft_steps: int = Field(8, ge=0, description="Cross-entropy optimizer steps per round on the round's kept pairs.")
    batch_size: int = Field(16, ge=1, description="Kept pairs per cross-entropy step (drawn in turn, an epoch a permutation).")
    learning_rate: float = Field(1e-4, gt=0, description="Adam learning rate of the cross-entropy steps.")
    rehearsal: int = Field(
        0, ge=0, description="Chats the start was trained on (first-turn teacher pairs) added to each cross-entropy step beside the kept pairs, "
        "so that training the repair turn does not pull the first turn away from where SFT left it (0: none)."
    )
    rehearsal_file: Optional[Path] = Field(None, description="Chat-format JSONL the rehearsal draws from; default: the train_file of the SFT run that made the start checkpoint.")
    state_temperature: float = Field(0.3, gt=0, description="Repair: the temperature at which the start checkpoint plays turn 1 to make the training states (the held-out game's).")
    start_from: str = Field(
        "auto", description='A recipe whose run gives the start checkpoint (e.g. recipes/sft.toml; emojikit run runs it first when missing or stale), '
        '"auto" (the sft_run checkpoint if present, else base), "base", or a checkpoint path.'
    )
    sft_run: Path = Field(Path("runs/sft"), description="Run directory whose latest checkpoint start_from=auto uses.")
    heldout_file: Optional[Path] = Field(
        None, description="Held-out targets (JSONL with a text field, or one per line): none of its rows trains or makes a training state; "
        "the first eval_targets are played; default: the first eval_targets of the prompt source."
    )
    exclude_files: list[Path] = Field(
        [], description="More held-out sets whose rows never train (nor make a training state), beside heldout_file: sets played by "
        "another command, e.g. recipes/targets/heldout.jsonl for `emojikit eval --targets` when heldout_file holds other messages."
    )
    target_pool: int = Field(400, ge=1, description="Training targets drawn from the prompt source (none held out, none whose teacher answer the start's SFT saw).")
    target_max_words: Optional[int] = Field(None, ge=1, description="Train only on targets of at most this many words.")
    eval_targets: int = Field(32, ge=0, description="Held-out targets played (the recipe's game) before, after and every eval_every rounds.")
    eval_every: int = Field(0, ge=0, description="Held-out game every N rounds (0: only before and after).")
    eval_temperature: float = Field(0.3, gt=0, description="Sender temperature of the held-out game.")
    save_every: int = Field(1, ge=0, description="Checkpoint every N rounds (0: only at the end).")
    log_kept: int = Field(16, ge=0, description="Kept pairs per round written to kept.jsonl.")

    @model_validator(mode="after")
    def _repeat_needs_repair(self):
        if self.baseline == "repeat" and self.states != "repair":
            raise ValueError('baseline = "repeat" needs states = "repair" (a first turn has no turn 1 to send again)')
        if self.search != "none" and self.states != "first_turn":
            raise ValueError('search needs states = "first_turn" (it rebuilds a first answer from the state\'s own samples)')
        if self.samples_per_state == 0 and (self.search == "none" or not self.teacher or self.baseline == "mean"):
            raise ValueError('samples_per_state = 0 needs search = "subset" and a teacher (whose emoji the search picks from) and a baseline '
                             'other than "mean" (with no samples the mean is the searched answer\'s own reward)')
        if self.search_min_emoji == "teacher" and (self.search == "none" or not self.teacher):
            raise ValueError('search_min_emoji = "teacher" needs search = "subset" and a teacher (whose answer\'s length is the floor)')
        if self.teacher and self.states != "repair" and self.search == "none":
            raise ValueError('teacher needs states = "repair", or search = "subset" on the first turn (there the SFT data already holds '
                             "the teacher's answers as they stand; the search only takes their emoji as proposals)")
        return self

    @field_validator("rehearsal_file")
    @classmethod
    def _chats(cls, path: Optional[Path]) -> Optional[Path]:
        from emojikit.training.sft import SFTSettings

        return path if path is None else SFTSettings._exists(path)  # a missing file or bad line fails here, naming file:line

    @field_validator("start_from")
    @classmethod
    def _start_exists(cls, value: str) -> str:
        from emojikit.training.grpo import GRPOSettings

        return GRPOSettings._start_exists(value)


@dataclass
class Candidate:
    """One sampled answer to one state, scored as the game scores it."""

    state: int  # index of its state in the round
    sample: object  # the Policy's Sample (prompt tokens + answer tokens)
    text: str
    valid: bool
    reward: float
    success: bool
    similarity: float
    teacher: bool = False  # the teacher's answer, not a sample of the policy
    searched: bool = False  # built by the search from the state's samples, not sampled as it stands


# --- the keep rule ------------------------------------------------------------------------


def keep_answers(candidates: list[list[Candidate]], s: RFTSettings, threshold_of, baselines: Optional[list[float]] = None) -> list[Candidate]:
    """The candidates that train, per state: valid, at least the threshold (min_reward, else a
    win), above the state's baseline (s.baseline: the mean of its k rewards, `baselines[i]`
    for "repeat", nothing for "none"); of those the best one ("best") or every distinct text
    ("wins"). `threshold_of(c)` says whether c passes the threshold."""
    kept = []
    for i, group in enumerate(candidates):
        if not group:
            continue
        if s.baseline == "mean":
            floor = statistics.fmean(c.reward for c in group)
        elif s.baseline == "repeat":
            floor = baselines[i] if baselines is not None else float("-inf")
        else:
            floor = float("-inf")
        passing = [c for c in group if c.valid and threshold_of(c) and c.reward > floor + 1e-9]
        if not passing:
            continue
        if s.keep == "best":
            kept.append(max(passing, key=lambda c: c.reward))  # max keeps the first of equals
        else:
            seen = set()
            for c in sorted(passing, key=lambda c: -c.reward):
                if c.text not in seen:
                    seen.add(c.text)
                    kept.append(c)
    return kept


def threshold(s: RFTSettings):
    if s.min_reward is None:
        return lambda c: c.success
    return lambda c: c.reward >= s.min_reward


# --- states and their answers ---------------------------------------------------------------


def first_turn_candidates(policy, decoder, judge, reward, targets, game, sampling, k: int) -> list[list[Candidate]]:
    """k one-turn episodes per target, played and scored by the game."""
    from emojikit.api.components import is_success
    from emojikit.play.game import play

    if k == 0:
        return [[] for _ in targets]
    one_turn = game.model_copy(update={"max_turns": 1})
    episodes = play(policy, decoder, judge, reward, targets, settings=one_turn, sampling=sampling, group_size=k)
    groups = []
    for i in range(len(targets)):
        group = []
        for ep in episodes[i * k : (i + 1) * k]:
            if ep.failed or not ep.turns:
                continue  # the judge gave up: no measured reward
            turn = ep.turns[0]
            group.append(Candidate(i, turn.sample, turn.emoji, turn.valid, float(ep.reward["total"]), is_success(reward, turn.similarity), turn.similarity))
        groups.append(group)
    return groups


def repair_candidates(policy, decoder, judge, reward, states, game, sampling, k: int) -> list[list[Candidate]]:
    """k turn-2 answers per state on the game's own turn-2 prompt, judged as the repair benchmark does."""
    groups: list[list[Candidate]] = [[] for _ in states]
    for j, ep in enumerate(sample_repairs(policy, decoder, judge, reward, states, game, sampling, k)):
        if not ep.failed:
            answer = ep.turns[1]
            groups[j // k].append(Candidate(j // k, answer.sample, answer.emoji, answer.valid, float(ep.reward["total"]), bool(ep.success), answer.similarity))
    return groups


def subset_search(judge, targets: list[str], groups: list[list[Candidate]], fmt, extra: Optional[list[Optional[str]]] = None,
                  floor_from_extra: bool = False) -> list[Optional[str]]:
    """Per target, the answer its judge believes in most among those built from the emoji the
    state's samples used (and the emoji of `extra`, one more proposed answer per state, such as
    a teacher's): greedy forward selection, one emoji at a time (the one that raises
    log p(target) most), at least fmt.min_emoji (with floor_from_extra, at least as many as
    extra's answer holds, within the format and the proposals), stopping when no emoji raises it
    or at fmt.max_emoji. None where the proposals hold fewer than min_emoji distinct emoji or the
    judge has no belief in the target. Every state's step is one batched call to the judge."""
    from emojikit.api import emojis
    from emojikit.api.components import JudgeView, target_logprobs

    texts = [[c.text for c in group] + ([extra[i]] if extra and extra[i] else []) for i, group in enumerate(groups)]
    proposals = [list(dict.fromkeys(e for text in group for e in emojis.split(text))) for group in texts]
    floors = [fmt.min_emoji] * len(targets)
    if floor_from_extra and extra:
        floors = [max(fmt.min_emoji, min(len(emojis.split(extra[i] or "")), fmt.max_emoji, len(p))) for i, p in enumerate(proposals)]
    chosen: list[list[str]] = [[] for _ in targets]
    best: list[tuple[float, Optional[str]]] = [(float("-inf"), None) for _ in targets]
    live = [i for i, p in enumerate(proposals) if len(p) >= fmt.min_emoji]
    while live:
        tried = [(i, e) for i in live for e in proposals[i] if e not in chosen[i]]
        beliefs = target_logprobs(judge, [JudgeView(["".join(chosen[i] + [e])]) for i, e in tried], [targets[i] for i, _ in tried])
        top: dict[int, tuple[float, str]] = {}
        for (i, e), logprob in zip(tried, beliefs):
            if logprob is not None and (i not in top or logprob > top[i][0]):
                top[i] = (logprob, e)
        still = []
        for i in live:
            if i not in top:
                continue  # the judge cannot say, or nothing is left to add
            logprob, e = top[i]
            grown = len(chosen[i]) + 1
            if grown > floors[i] and logprob <= best[i][0]:
                continue  # no emoji raises the belief: the best answer so far stands
            chosen[i].append(e)
            if grown >= floors[i]:
                best[i] = (logprob, "".join(chosen[i]))
            if grown < fmt.max_emoji:
                still.append(i)
        live = still
    return [answer for _, answer in best]


class _Replayed:
    """A sender for `game.play` whose turns are given Samples, in prompt order."""

    def __init__(self, samples: list):
        self.samples = samples
        self.name = "searched"

    def sample(self, prompts, n, params, decoder=None):
        assert len(prompts) == len(self.samples), "one searched answer per prompt"
        return [[s] * n for s in self.samples]


def searched_candidates(policy, decoder, judge, reward, targets, groups: list[list[Candidate]], game, sampling, extra: Optional[list[Optional[str]]] = None,
                        floor_from_extra: bool = False) -> tuple[list[Optional[Candidate]], int]:
    """The search's answer per state (from its samples' emoji and those of `extra`, at least as
    long as extra's with floor_from_extra) as a one-turn episode of the game, in the policy's own
    tokens (None where there is none, or the policy could not sample it under the decoder), and
    how many answers could not be sampled."""
    from emojikit.api.components import is_success
    from emojikit.api.format import format_of
    from emojikit.play.game import play, sender_prompt
    from emojikit.training.guidance import answers_as_samples

    one_turn = game.model_copy(update={"max_turns": 1})
    answers = subset_search(judge, [m.text for m in targets], groups, format_of(decoder), extra, floor_from_extra)
    found = [i for i, a in enumerate(answers) if a is not None]
    prompts = [sender_prompt(one_turn, targets[i].text, [], format_of(decoder)) for i in found]
    samples = answers_as_samples(policy, prompts, [answers[i] for i in found], sampling, decoder)  # sampling.max_tokens is the game's budget
    producible = [(i, s) for i, s in zip(found, samples) if s is not None]
    out: list[Optional[Candidate]] = [None] * len(targets)
    if producible:
        episodes = play(_Replayed([s for _, s in producible]), decoder, judge, reward, [targets[i] for i, _ in producible], settings=one_turn, sampling=sampling)
        for (i, _), ep in zip(producible, episodes):
            if not ep.failed and ep.turns:
                turn = ep.turns[0]
                out[i] = Candidate(i, turn.sample, turn.emoji, turn.valid, float(ep.reward["total"]), is_success(reward, turn.similarity), turn.similarity, searched=True)
    return out, len(found) - len(producible)


def teacher_repair_candidates(policy, decoder, judge, reward, teacher_answers, states, game, sampling) -> tuple[list[Optional[Candidate]], int]:
    """The teacher's turn-2 answer per state as a Candidate in the policy's own tokens (None where
    it cannot be one: not producible under the decoder, or the judge gave up), judged as a sampled
    repair is; and how many answers the decoder could not produce."""
    from emojikit.api.format import format_of
    from emojikit.evaluation.repair import turn2_prompts
    from emojikit.training.guidance import answers_as_samples
    from emojikit.training.repair_states import judged_repairs

    prompts = turn2_prompts(game.model_copy(update={"max_turns": 2}), states, format_of(decoder))
    answers = teacher_answers.turn2(states, prompts, sampling, decoder)
    samples = answers_as_samples(policy, prompts, answers, sampling, decoder)
    producible = [i for i, sample in enumerate(samples) if sample is not None]
    out: list[Optional[Candidate]] = [None] * len(states)
    if producible:
        episodes = judged_repairs(decoder, judge, reward, [states[i] for i in producible], [samples[i] for i in producible])
        for i, ep in zip(producible, episodes):
            if not ep.failed:
                answer = ep.turns[1]
                out[i] = Candidate(i, answer.sample, answer.emoji, answer.valid, float(ep.reward["total"]), bool(ep.success), answer.similarity, teacher=True)
    return out, len(states) - len(producible)


# --- cross-entropy on the kept pairs --------------------------------------------------------------


def rehearsal_chats(recipe, s: RFTSettings, start: Optional[str]) -> list[list[dict]]:
    """The chats replayed beside the kept pairs: rehearsal_file, else the start's SFT train_file."""
    from emojikit.api.errors import ConfigError
    from emojikit.training.sft import load_chats
    from emojikit.training.targets import sft_train_file

    if not s.rehearsal:
        return []
    path = s.rehearsal_file or sft_train_file(start)
    if path is None:
        raise ConfigError(f"{recipe.path}: [rft] rehearsal = {s.rehearsal} replays the chats the start was trained on, and start {start or 'base'} "
                          "is not an SFT run's checkpoint: set [rft] rehearsal_file")
    return load_chats(path)


def train_kept(policy, kept: list[Candidate], s: RFTSettings, seed: int, round_index: int, rehearsal: list[list[dict]] = ()) -> dict:
    """sft_steps cross-entropy steps over the kept pairs (the answer's tokens carry the loss, as
    sampled), each with s.rehearsal chats of `rehearsal` beside them (epochs laid end to end across rounds)."""
    from emojikit.api.policy import AdamParams, Datum
    from emojikit.training.sft import batch_indices, chat_datum

    if not kept or not s.sft_steps:
        return {}
    datums = [Datum.from_sample(c.sample) for c in kept]
    rehearse = bool(rehearsal) and s.rehearsal > 0
    losses, norms = [], []
    for step in range(s.sft_steps):
        batch = [datums[i] for i in batch_indices(len(datums), s.batch_size, step, seed * 1_000 + round_index)]
        if rehearse:
            replayed = batch_indices(len(rehearsal), s.rehearsal, round_index * s.sft_steps + step, seed)
            batch += [chat_datum(policy, rehearsal[i]) for i in replayed]
        out = policy.forward_backward(batch, "cross_entropy")
        optim = policy.optim_step(AdamParams(learning_rate=s.learning_rate))
        losses.append(out.loss)
        if "grad_norm" in optim:
            norms.append(optim["grad_norm"])
    row = {"loss": statistics.fmean(losses), "loss_first": losses[0], "loss_last": losses[-1], "sft_steps": len(losses)}
    if rehearse:
        row["rehearsal_chats"] = s.rehearsal * len(losses)
    if norms:
        row["grad_norm"] = statistics.fmean(norms)
    return row


def round_statistics(candidates: list[list[Candidate]], kept: list[Candidate]) -> dict:
    from emojikit.api import emojis

    everything = [c for group in candidates for c in group if not c.searched]  # the policy's samples (and a teacher's answers)
    row = {
        "states": len(candidates), "samples": len(everything), "kept": len(kept),
        "kept_share": len(kept) / max(len(everything) or len(candidates), 1),  # of the samples; of the states when none was sampled
        "states_kept": len({c.state for c in kept}) / max(len(candidates), 1),
        "states_with_win": sum(any(c.success and not c.searched for c in group) for group in candidates) / max(len(candidates), 1),
        "sample_success_rate": statistics.fmean(c.success for c in everything) if everything else 0.0,
        "reward_mean_all": statistics.fmean(c.reward for c in everything) if everything else 0.0,
        "format_violations": statistics.fmean(not c.valid for c in everything) if everything else 0.0,
    }
    if kept:
        row["kept_teacher_share"] = statistics.fmean(c.teacher for c in kept)
        row["kept_searched_share"] = statistics.fmean(c.searched for c in kept)
        row["reward_mean_kept"] = statistics.fmean(c.reward for c in kept)
        row["similarity_mean_kept"] = statistics.fmean(c.similarity for c in kept)
        row["emoji_mean_kept"] = statistics.fmean(len(emojis.split(c.text)) for c in kept)
    return row


# --- the loop ---------------------------------------------------------------------------------


def run(recipe, run_dir) -> None:
    from tqdm import tqdm

    from emojikit.api import emojis
    from emojikit.api.components import add_candidates, answers_of
    from emojikit.api.policy import SamplingParams
    from emojikit.play.targets import split_targets
    from emojikit.stages.interrupt import Interrupted, graceful_stop
    from emojikit.stages.runs import resolve_start
    from emojikit.support.io import atomic_write_text
    from emojikit.training.grpo import before_after_table, evaluate_game, held_out_judge, heldout_evaluations
    from emojikit.training.sft import batch_indices
    from emojikit.training.targets import sft_seen

    s: RFTSettings = recipe.settings["rft"]
    game = recipe.settings["game"]

    start_ref = resolve_start(s)
    seen = sft_seen(start_ref)  # messages whose teacher answers trained the start never train here
    rehearsal = rehearsal_chats(recipe, s, start_ref)
    heldout, train_targets = split_targets(recipe, s, run_dir, seen)
    backend = recipe.components["backend"]
    if start_ref is not None and "init_from" in type(backend.config).model_fields:
        backend = type(backend)(backend.table, backend.spec, backend.config.model_copy(update={"init_from": start_ref}))
    recipe.components["backend"] = backend
    judge = recipe.build("judge", run_dir.path)
    reward = recipe.build("reward", run_dir.path)
    policy = recipe.build("backend", run_dir.path)
    decoder = recipe.build("decoder", run_dir.path)
    require_belief_for_search(recipe, s, judge)
    add_candidates(judge, [m.text for m in heldout + train_targets])
    heldout_judge = held_out_judge(recipe, run_dir, judge, heldout)
    print(f"sender starts from {start_ref or 'the base model'}; {len(train_targets)} training targets"
          f"{f' (none of the {len(seen)} messages its SFT trained on)' if seen else ''}, {len(heldout)} held out")
    atomic_write_text(run_dir.file("start.json"), json.dumps({"start": start_ref or "base"}) + "\n")

    states = None
    if s.states == "repair":  # made by the start weights, before resume_policy loads a later round
        states = train_states(policy, decoder, judge, reward, train_targets, game, s.state_temperature, recipe.seed, run_dir, start_ref or "base", "rft")
    pool_size = len(states) if states is not None else len(train_targets)
    teacher_answers, proposer = None, None
    if s.teacher and s.states == "first_turn":  # its answers' emoji join the search's proposals
        proposer = recipe.build_named("teacher", s.teacher, run_dir.path)
    elif s.teacher:
        from emojikit.evaluation.repair import answers_for
        from emojikit.play.teacher_sender import TEACHER_PREFIX

        teacher_answers = answers_for(recipe, TEACHER_PREFIX + s.teacher, game, run_dir.path)

    start = run_dir.resume_policy(policy, (METRICS_FILE, EVAL_FILE, KEPT_FILE))
    evaluate, evals = heldout_evaluations(
        run_dir, lambda: evaluate_game(policy, decoder, heldout_judge, reward, heldout, game, s.eval_temperature, recipe.seed))

    if heldout:
        evaluate(0)
    stop_hint = recipe.resume_hint()
    with graceful_stop() as stop:
        bar = tqdm(range(start, s.rounds), initial=start, total=s.rounds, desc="rft", unit="round")
        for round_index in bar:
            t0 = time.time()
            done = round_index + 1
            chosen = batch_indices(pool_size, min(s.states_per_round, pool_size), round_index, recipe.seed)
            sampling = SamplingParams(max_tokens=game.max_new_tokens, temperature=s.temperature, seed=recipe.seed * 100_003 + round_index)
            baselines, search_row = None, {}
            if states is not None:
                round_states = [states[i] for i in chosen]
                candidates = repair_candidates(policy, decoder, judge, reward, round_states, game, sampling, s.samples_per_state)
                if teacher_answers is not None:
                    taught, unproducible = teacher_repair_candidates(policy, decoder, judge, reward, teacher_answers, round_states, game, sampling)
                    for group, candidate in zip(candidates, taught):
                        group.extend([candidate] if candidate is not None else [])
                    teacher_row = {"teacher_wins": statistics.fmean(bool(c and c.success) for c in taught), "teacher_unproducible": unproducible}
                if s.baseline == "repeat":
                    baselines = repeat_baselines(judge, reward, round_states)
                targets = [st.target for st in round_states]
            else:
                round_targets = [train_targets[i] for i in chosen]
                candidates = first_turn_candidates(policy, decoder, judge, reward, round_targets, game, sampling, s.samples_per_state)
                targets = [m.text for m in round_targets]
                if s.search != "none":
                    proposed = answers_of(proposer, round_targets) if proposer is not None else None
                    searched, unproducible = searched_candidates(policy, decoder, judge, reward, round_targets, candidates, game, sampling, proposed,
                                                                   floor_from_extra=s.search_min_emoji == "teacher")
                    search_row = {"search_answers": sum(c is not None for c in searched), "search_wins": statistics.fmean(bool(c and c.success) for c in searched),
                                  "search_unproducible": unproducible,
                                  "search_emoji_mean": statistics.fmean(len(emojis.split(c.text)) for c in searched if c) if any(searched) else 0.0,
                                  "search_reward_mean": statistics.fmean(c.reward for c in searched if c) if any(searched) else 0.0}
                    for group, candidate in zip(candidates, searched):
                        group.extend([candidate] if candidate is not None else [])
            t_sample = time.time() - t0
            kept = keep_answers(candidates, s, threshold(s), baselines)
            row = {"step": done, "round": done, **round_statistics(candidates, kept), "sample_seconds": t_sample}
            if teacher_answers is not None:
                row.update(teacher_row)
            row.update(search_row)
            if baselines is not None:
                row["repeat_reward_mean"] = statistics.fmean(b for b in baselines if b != float("inf")) if any(b != float("inf") for b in baselines) else 0.0
            row.update(train_kept(policy, kept, s, recipe.seed, round_index, rehearsal))
            row["round_seconds"] = time.time() - t0
            for c in kept[: s.log_kept]:
                run_dir.log(KEPT_FILE, {"step": done, "target": targets[c.state], "answer": c.text, "reward": round(c.reward, 4), "similarity": round(c.similarity, 4),
                                        "source": "teacher" if c.teacher else "search" if c.searched else "sample"})
            if heldout and s.eval_every and done % s.eval_every == 0 and done != s.rounds:
                held = evaluate(done)
                row["eval_success_rate"], row["eval_repair_rate"] = held["success_rate"], held["repair_rate"]
            run_dir.log(METRICS_FILE, row)
            bar.set_postfix(kept=f"{row['kept_share']:.2f}", reward=f"{row['reward_mean_all']:.3f}", loss=f"{row.get('loss', 0.0):.3f}")
            if (s.save_every and done % s.save_every == 0) or done == s.rounds or stop:
                if heldout and done == s.rounds:
                    evaluate(done)
                with run_dir.new_checkpoint(done) as tmp:
                    policy.save(str(tmp))
            if stop:
                bar.close()
                raise Interrupted(f"stopped by {stop.signal_name} after round {done} (checkpoint saved); {stop_hint}")
        bar.close()

    if heldout and 0 in evals and s.rounds in evals:
        table = before_after_table(evals[0], evals[s.rounds])
        atomic_write_text(run_dir.file("before_after.md"), table)
        print(table)
    print(f"final adapter: {run_dir.checkpoint_path(s.rounds)}")


def require_belief_for_search(recipe, s: RFTSettings, judge) -> None:
    """The search scores answers by the judge's belief in the target: a judge without one
    (`TargetBelief`) would silently search nothing."""
    from emojikit.api.components import TargetBelief
    from emojikit.api.errors import ConfigError

    if s.search != "none" and not isinstance(judge, TargetBelief):
        raise ConfigError(f"{recipe.path}: [rft] search = \"{s.search}\": the judge `{recipe.components['judge'].spec.name}` reports no belief in "
                          "the target (TargetBelief); use a retrieval judge (retrieval, keywords, panel, lm-reader) or set search = \"none\"")


def preflight(recipe) -> None:
    """What run() would reject, before a run directory is made: a token budget too small for
    the decoder's shortest answer, a held-out file that is missing or has a bad line."""
    from emojikit.api.errors import ConfigError
    from emojikit.composition.preflight import token_budget_problem
    from emojikit.play.targets import check_target_files
    from emojikit.stages.pipeline import upstream_run_dirs

    problem = token_budget_problem(recipe, recipe.settings["game"].max_new_tokens, "[game] max_new_tokens")
    if problem:
        raise ConfigError(f"{recipe.path}: {problem}")
    check_target_files(recipe, recipe.settings["rft"], upstream_run_dirs(recipe))
