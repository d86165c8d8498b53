"""GRPO on the retrieval game: one loop against Policy, readable top to bottom.

A step is named phases, each a small function below:
  play (a Group of group_size episodes per target) -> drop failed groups -> advantages
  (group-relative, per episode or per turn) -> datums (only the sender's tokens carry an
  advantage) -> KL to the start policy, folded into the advantages -> train (ppo_epochs
  passes of `minibatches` optimizer steps over the batch) -> evaluate -> save.
With [grpo] states = "repair" the first phase is instead: draw batch_size cached first-turn misses
of training targets (made once per run, emojikit/training/repair_states.py) -> group_size turn-2
answers per miss, scored by the repair's own outcome; the phases after it are the same, and
only the turn-2 tokens carry an advantage.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional

from pydantic import Field, field_validator, model_validator

from emojikit.api.components import Episode, Message, add_candidates
from emojikit.api.config import ConfigModel
from emojikit.evaluation.metrics import summarize  # noqa: F401 - the game figures every loop reports
from emojikit.api.policy import acceptance_between, sample_totals
from emojikit.play.targets import split_targets  # (held-out, training) targets of a run
from emojikit.stages.runs import resolve_start  # the checkpoint a run starts from
from emojikit.training.targets import sft_seen  # the messages the start's SFT trained on
from emojikit.training.weights import loss_weights

EPISODES_FILE = "episodes.jsonl"
METRICS_FILE = "metrics.jsonl"
EVAL_FILE = "eval.jsonl"


class GRPOSettings(ConfigModel):
    states: Literal["episodes", "repair"] = Field(
        "episodes", description='"episodes": each step plays whole games on training targets; "repair": each step draws batch_size '
        "cached first-turn misses of training targets (made once per run by the start, as [rft] makes them: train_states.jsonl) "
        "and samples group_size turn-2 answers per miss; only turn 2 trains, reward = the repair's own outcome."
    )
    state_temperature: float = Field(0.3, gt=0, description='states = "repair": the temperature at which the start plays turn 1 to make the states (the held-out game\'s).')
    steps: int = Field(8, ge=1, description="Training steps (the measured main job: 8; 4x the steps did not gain held-out success).")
    batch_size: int = Field(16, ge=1, description="Targets per step: more targets per update, less noise per step.")
    group_size: int = Field(4, ge=2, description="Episodes per target; advantages are relative within a group.")
    max_turns: Optional[int] = Field(None, ge=1, description="Overrides [game] max_turns for training and evaluation.")
    learning_rate: float = Field(2e-4, gt=0, description="Adam learning rate of the LoRA weights (1e-3 and 5e-4 drifted off and lost held-out success).")
    temperature: float = Field(0.5, gt=0, description="Sender temperature while training (the trainer scores with the same); near the held-out game's 0.3: RL at 1.0 sharpened the T=1 sender only.")
    kl_coef: float = Field(0.05, ge=0, description="Penalty per token on log(pi/pi_start), folded into the advantages.")
    loss: Literal["ppo", "importance_sampling"] = Field("ppo", description='"ppo": the clipped ratio objective; "importance_sampling": the unclipped ratio times the advantage.')
    clip: float = Field(0.2, gt=0, description="PPO clip range.")
    ppo_epochs: int = Field(1, ge=1, description="Passes over each step's episodes; after the first, the PPO clip bounds the update.")
    minibatches: int = Field(1, ge=1, description="Optimizer steps per pass: the step's groups split into this many parts.")
    credit: Literal["episode", "turn"] = Field(
        "episode",
        description='"episode": every turn carries the episode\'s advantage; "turn": turn k carries the reward from its own '
        "similarity gain onward, baselined against the group's episodes that reached turn k (by 0 when no other did).",
    )
    normalize_std: bool = Field(False, description="Divide advantages by the group's reward std (off: it made near-equal misses look like big wins).")
    negative_weight: float = Field(
        1.0, ge=0, le=1, description="Scale of negative advantages. 0 trains only on episodes better than their group's mean: "
        "their tokens are pushed up and none are pushed down (a failed answer shares most of its emoji with winning ones)."
    )
    emoji_credit: float = Field(
        0.0, ge=0, description="Weight of each emoji's own credit (emojikit/training/credit.py: the judge's log-belief in the target with "
        "the turn minus without that emoji) added to its tokens' advantage; needs a judge with beliefs (the retrieval judges)."
    )
    emoji_credit_baseline: Literal["group", "none"] = Field(
        "group", description='"group": an emoji\'s credit less the mean credit of the emoji its group sent; "none": the raw credit.'
    )
    loss_normalization: Literal["token", "sequence", "constant"] = Field(
        "token", description='How the policy loss is averaged over the step\'s sampled tokens: "token" (every token of the batch '
        'equally, so an episode with two turns weighs twice), "sequence" (each episode\'s tokens averaged, then the mean over '
        'episodes: no turn-count bias), "constant" (the sum over tokens divided by episodes x max_turns x max_new_tokens, Dr. GRPO).'
    )
    kl_center: bool = Field(
        False, description="Centre the KL penalty as tinker-cookbook does: each token's advantage gets kl_coef x (the batch's mean "
        "log(pi/pi_start) - its own), so the penalty moves tokens relative to each other and pushes the batch neither up nor down."
    )
    teacher_episodes: int = Field(
        0, ge=0, description="Episodes per group that open with the [teacher]'s answer instead of a sample (off-policy guidance; "
        "the sender plays later turns). The judge's reward decides whether the answer is pushed up or down."
    )
    start_from: str = Field(
        "auto",
        description='A recipe whose run gives the start checkpoint (e.g. recipes/sft.toml; emojikit run runs it first when missing or stale), '
        '"auto" (the sft_run checkpoint if present, else base), "base", or a checkpoint path.',
    )
    sft_run: Path = Field(Path("runs/sft"), description="Run directory whose latest checkpoint start_from=auto uses.")
    heldout_file: Optional[Path] = Field(
        None, description="Held-out targets (JSONL with a text field, or one per line): none of its rows trains, the first eval_targets are played; default: the first eval_targets of the prompt source."
    )
    compare_files: list[Path] = Field(
        [], description="More held-out sets (e.g. recipes/targets/real-texts.jsonl, messages people wrote): the comparison "
        "plays every row of each beside the heldout_file's targets; none of their rows trains."
    )
    exclude_files: list[Path] = Field(
        [], description="More held-out sets whose rows never train (nor make a training state), beside heldout_file: sets played by "
        "another command, e.g. recipes/targets/heldout.jsonl for `emojikit eval --targets` when heldout_file holds other messages."
    )
    compare_judges: list[str] = Field(
        [], description="Readers the comparison also plays besides the recipe's judge, by name (e.g. retrieval, lm-reader): the senders "
        "under readers RL did not train against. Each takes the settings of the recipe's [judge] table that it has (distractors, pool_file, ...); "
        "the base model is left out there."
    )
    compare_rows: int = Field(
        0, ge=0, description="Rows of each compare_files set the comparison plays: the first N (0: every row). Every row stays in the "
        "judge's candidate pool, so a played target is as hard to find as in the full game; fewer rows only widen the interval."
    )
    target_max_words: Optional[int] = Field(
        None, ge=1, description="Train only on targets of at most this many words (the data recipe's held-out RL targets have at most 12)."
    )
    eval_targets: int = Field(32, ge=0, description="Held-out targets played before, after and every eval_every steps (never trained on).")
    eval_every: int = Field(0, ge=0, description="Held-out game every N steps (0: only before and after).")
    eval_temperature: float = Field(0.3, gt=0, description="Sender temperature of the held-out game.")
    save_every: int = Field(0, ge=0, description="Checkpoint every N steps (0: only at the end).")
    log_groups: int = Field(2, ge=0, description="Groups per step written whole to episodes.jsonl.")
    target_pool: int = Field(2000, ge=1, description="Training targets drawn from the prompt source.")
    max_failed_steps: int = Field(
        3, ge=1, description="Stop (with a checkpoint) after this many steps in a row in which the judge failed on every group."
    )
    compare: bool = Field(
        False, description="At the end, play the held-out targets with base, the start checkpoint, the final one and the teacher side by side (comparison.md/.json/.png)."
    )
    seed_spread: Optional[Path] = Field(
        None, description="A seed-spread file (`emojikit spread RUN...` gathers the comparisons of several runs of this recipe): the "
        "comparison prints this run's SFT and GRPO rows beside the recorded runs' mean, spread between runs and a sign test over the "
        "targets, and says which GRPO - SFT differences are outside noise. \"\" (or unset): none."
    )

    @model_validator(mode="after")
    def _guided_fewer_than_group(self):
        if self.teacher_episodes >= self.group_size:
            raise ValueError(f"teacher_episodes ({self.teacher_episodes}) must be less than group_size ({self.group_size}): a group needs the sender's own episodes")
        return self

    @model_validator(mode="after")
    def _repair_trains_turn_two_only(self):
        # A repair state's group is turn-2 answers to one miss: no episode to open, no turns to credit apart.
        if self.states == "repair":
            for wrong, why in ((self.teacher_episodes, "teacher_episodes must be 0 (a repair state has no episode for the teacher to open)"),
                               (self.emoji_credit, "emoji_credit must be 0 (per-emoji credit reads whole episodes)"),
                               (self.credit == "turn", 'credit must be "episode" (only turn 2 is sampled: there are no turns to credit apart)')):
                if wrong:
                    raise ValueError(f'states = "repair": {why}')
        return self

    @field_validator("seed_spread", mode="before")
    @classmethod
    def _no_spread_when_empty(cls, value):
        return None if value == "" else value  # --set grpo.seed_spread='""': a run that will be recorded, not compared

    @field_validator("seed_spread")
    @classmethod
    def _spread_readable(cls, value: Optional[Path]) -> Optional[Path]:
        if value is not None:
            from emojikit.api.errors import InputFileError
            from emojikit.evaluation.spread import read_record

            try:
                read_record(value)
            except InputFileError as exc:
                raise ValueError(str(exc)) from None
        return value

    @field_validator("start_from")
    @classmethod
    def _start_exists(cls, value: str) -> str:
        if value.endswith(".toml"):
            if not Path(value).is_file():
                raise ValueError(f"{value}: recipe file not found")
        from emojikit.api.errors import InputFileError
        from emojikit.stages.runs import resolve_checkpoint

        try:
            return resolve_checkpoint(value)  # a run directory means its final checkpoint
        except InputFileError as exc:
            raise ValueError(f'{exc}; give a checkpoint or run directory, "auto", "base" or a recipe') from None


@dataclass
class Group:
    """group_size episodes of one target: the unit GRPO compares within."""

    target: Message
    episodes: list[Episode]

    @property
    def failed(self) -> bool:
        return any(ep.failed for ep in self.episodes)

    @property
    def rewards(self) -> list[float]:
        return [ep.reward["total"] for ep in self.episodes]


# --- the phases of a step ----------------------------------------------------------------


def play_groups(policy, decoder, judge, reward, targets: list[Message], game, sampling, group_size: int, guided=None, teacher_episodes: int = 0) -> list[Group]:
    """group_size episodes per target; with a `guidance.GuidedSender`, the last
    teacher_episodes of each group open with the teacher's answer."""
    from emojikit.play.game import play

    own = group_size - teacher_episodes if guided is not None else group_size
    episodes = play(policy, decoder, judge, reward, targets, settings=game, sampling=sampling, group_size=own)
    groups = [Group(t, episodes[i * own : (i + 1) * own]) for i, t in enumerate(targets)]
    if guided is not None and teacher_episodes:
        guided_episodes = play(guided, decoder, judge, reward, targets, settings=game, sampling=sampling, group_size=teacher_episodes)
        for i, group in enumerate(groups):
            group.episodes += guided_episodes[i * teacher_episodes : (i + 1) * teacher_episodes]
    return groups


def draw_states(states: list, n: int, step: int, seed: int) -> list:
    """states = "repair": the step's n repair states, drawn in turn (an epoch is a seeded permutation)."""
    from emojikit.training.sft import batch_indices

    return [states[i] for i in batch_indices(len(states), min(n, len(states)), step, seed)]


def repair_groups(policy, decoder, judge, reward, states, game, sampling, group_size: int) -> list[Group]:
    """group_size turn-2 answers per repair state, each a 2-turn episode whose turn 1 is the
    state's miss (no sample, so it carries no loss) and whose reward is the repair's own outcome."""
    from emojikit.training.repair_states import sample_repairs

    episodes = sample_repairs(policy, decoder, judge, reward, states, game, sampling, group_size)
    return [Group(Message(state.target, state.category), episodes[i * group_size : (i + 1) * group_size]) for i, state in enumerate(states)]


def drop_failed(groups: list[Group]) -> list[Group]:
    """A group with an episode the judge could not answer is dropped whole: its advantages
    would be relative to rewards that were never measured."""
    return [group for group in groups if not group.failed]


def group_advantages(rewards_G: list[float], normalize_std: bool) -> list[float]:
    """Mean-centred rewards of one group, optionally divided by their std."""
    mean = sum(rewards_G) / len(rewards_G)
    centred = [r - mean for r in rewards_G]
    if normalize_std:
        std = statistics.pstdev(rewards_G)
        centred = [c / (std + 1e-6) for c in centred]
    return centred


def turn_advantages(group: Group, normalize_std: bool, credit: str) -> list[list[float]]:
    """One advantage per turn of every episode of the group.

    "episode": every turn gets the episode's group-relative advantage. "turn": turn k's
    return is the episode's total minus the similarity already reached before it (what
    turn k and later turns added), baselined by the mean return at turn k over the group's
    episodes that played turn k. With fewer than two of them there is no peer to compare
    with, and the baseline is 0, a turn that changes nothing: a lone rescue in a group of
    first-turn wins keeps its own improvement (the episode's advantage, negative there,
    would punish the repair).
    """
    rewards_G = group.rewards
    episode_adv_G = group_advantages(rewards_G, normalize_std=False)
    scale = statistics.pstdev(rewards_G) + 1e-6 if normalize_std else 1.0
    if credit == "episode":
        return [[a / scale] * len(ep.turns) for ep, a in zip(group.episodes, episode_adv_G)]
    returns = [[total - (ep.turns[k - 1].similarity if k else 0.0) for k in range(len(ep.turns))] for ep, total in zip(group.episodes, rewards_G)]
    out = []
    for ep_returns, a in zip(returns, episode_adv_G):
        row = []
        for k, ret in enumerate(ep_returns):
            peers = [r[k] for r in returns if len(r) > k]
            row.append((ret - statistics.fmean(peers) if len(peers) >= 2 else ret) / scale)
        out.append(row)
    return out


def episode_datums(episode: Episode, advantage, budget: int, token_bonus: Optional[list[list[float]]] = None) -> list:
    """One datum per turn: the turn's prompt plus the sender's tokens, which carry the
    advantage (one float for every turn, or one per turn), plus each token's bonus (per
    turn, one float per sampled token) when given."""
    from emojikit.api.policy import Datum

    per_turn = advantage if isinstance(advantage, list) else [advantage] * len(episode.turns)
    datums = []
    for k, (turn, a) in enumerate(zip(episode.turns, per_turn)):
        if turn.sample is None:
            continue
        datum = Datum.from_sample(turn.sample, advantage=a, decoded=True, decode_budget=budget)
        first = len(turn.sample.prompt_tokens) - 1  # where the sampled tokens start among the targets
        for j, bonus in enumerate(token_bonus[k] if token_bonus else []):
            datum.advantages[first + j] += bonus
        datums.append(datum)
    return datums


def group_datums(groups: list[Group], g: GRPOSettings, budget: int, credit=None, max_turns: int = 1) -> tuple[list[list], int]:
    """(datums per group that teaches, groups skipped): a group whose rewards are all equal
    and whose emoji earned no credit teaches nothing. `credit` (an `EmojiCredit`, when
    g.emoji_credit > 0) adds each emoji's own credit to its tokens. The tokens' loss weights
    follow g.loss_normalization over the whole step (max_turns x budget is an episode's most
    tokens, the "constant" divisor; g.max_turns wins when set; one turn for repair states)."""
    per_group, per_episode, skipped = [], [], 0
    for group in groups:
        bonus = credit.token_bonus(group.episodes, g.emoji_credit, g.emoji_credit_baseline) if credit is not None else None
        flat = max(group.rewards) - min(group.rewards) < 1e-9
        if flat and not (bonus and any(b for ep in bonus for turn in ep for b in turn)):
            skipped += 1
            continue
        advantages = [[a if a >= 0 else a * g.negative_weight for a in row] for row in turn_advantages(group, g.normalize_std, g.credit)]
        episodes = [episode_datums(ep, adv, budget, bonus[i] if bonus else None) for i, (ep, adv) in enumerate(zip(group.episodes, advantages))]
        per_episode += [e for e in episodes if e]
        per_group.append([d for e in episodes for d in e])
    sampled_turns = 1 if g.states == "repair" else (g.max_turns or max_turns)  # a repair state samples turn 2 only
    loss_weights(per_episode, g.loss_normalization, sampled_turns * budget)
    return per_group, skipped


def fold_kl(policy, datums: list, *, temperature: float, decoder, kl_coef: float, center: bool = False) -> float:
    """Mean per-token log(pi/pi_start) of the sampled tokens; kl_coef times it is subtracted
    from each token's advantage, or with `center` kl_coef x (its own - the batch's mean), as
    tinker-cookbook's rl/metrics.py does: a penalty that sums to zero over the batch's tokens.
    The sampler's logprobs stand for pi (same weights)."""
    ref_logprobs = policy.compute_logprobs(datums, temperature=temperature, decoder=decoder, reference=True, weighted_only=True)
    per_token = [[(t, d.logprobs[t] - ref[t]) for t, w in enumerate(d.weights) if w] for d, ref in zip(datums, ref_logprobs)]
    kl_n = sum(len(row) for row in per_token)
    mean_kl = sum(kl for row in per_token for _, kl in row) / max(kl_n, 1)
    offset = mean_kl if center else 0.0
    for d, row in zip(datums, per_token):
        for t, kl in row:
            d.advantages[t] -= kl_coef * (kl - offset)
    return mean_kl


def split_groups(per_group: list[list], parts: int) -> list[list]:
    """The step's datums in `parts` minibatches of whole groups (a group's advantages sum to
    zero, so a minibatch of whole groups keeps its baseline)."""
    parts = max(1, min(parts, len(per_group)))
    return [[d for group in per_group[i::parts] for d in group] for i in range(parts)]


def train(policy, per_group: list[list], g: GRPOSettings, *, decoder) -> dict:
    """ppo_epochs passes, each `minibatches` forward_backward + optim_step calls. The first
    call of the first pass sees the sampler's own weights (ratio 1: the replay check)."""
    from emojikit.api.policy import AdamParams

    row: dict = {}
    losses = []
    for epoch in range(g.ppo_epochs):
        for part, datums in enumerate(split_groups(per_group, g.minibatches)):
            out = policy.forward_backward(datums, g.loss, temperature=g.temperature, decoder=decoder, clip=g.clip)
            optim = policy.optim_step(AdamParams(learning_rate=g.learning_rate))
            losses.append(out.loss)
            if epoch == 0 and part == 0:
                row.update({"trained_tokens": out.n_tokens, **out.metrics, **{f"optim/{k}": v for k, v in optim.items()}})
            else:
                row["last_clip_fraction"] = out.metrics.get("clip_fraction", 0.0)
                row["last_ratio_max_deviation"] = out.metrics.get("ratio_max_deviation", 0.0)
    row["loss"] = statistics.fmean(losses)
    row["optimizer_steps"] = len(losses)
    return row


# --- evaluation and the start ---------------------------------------------------------------


def held_out_judge(recipe, run_dir, judge, heldout: list[Message]):
    """The judge of the run's own held-out game. A candidate-pool judge gets a second instance
    whose pool is the held-out targets and the distractors, as in the comparison and `emojikit
    sweep`: with the training targets in the pool, a sender that learned them draws the judge to
    them on held-out targets (the in-run curve fell where the comparison did not; README)."""
    from emojikit.api.components import CandidatePool

    if not isinstance(judge, CandidatePool):
        return judge
    held_judge = recipe.build("judge", run_dir.path)
    add_candidates(held_judge, [m.text for m in heldout])
    return held_judge


def heldout_evaluations(run_dir, play_heldout):
    """(evaluate, evals): evaluate(step) plays the held-out game once per step and logs it to
    eval.jsonl; evals holds every step played, also those a resumed run read back. Shared by
    the GRPO and RFT loops."""
    evals = {row["step"]: row for row in run_dir.read(EVAL_FILE)}

    def evaluate(step: int) -> dict:
        if step not in evals:
            evals[step] = {"step": step, **play_heldout()}
            run_dir.log(EVAL_FILE, evals[step])
        return evals[step]

    return evaluate, evals


def evaluate_game(policy, decoder, judge, reward, targets, game_settings, temperature: float, seed: int) -> dict:
    from emojikit.play.game import play
    from emojikit.api.policy import SamplingParams

    sampling = SamplingParams(max_tokens=game_settings.max_new_tokens, temperature=temperature, seed=seed)
    episodes = play(policy, decoder, judge, reward, targets, settings=game_settings, sampling=sampling, group_size=1)
    return {"targets": len(targets), **summarize(episodes), "failed_episodes": sum(ep.failed for ep in episodes)}


# --- the loop ---------------------------------------------------------------------------------


def run(recipe, run_dir) -> None:
    from tqdm import tqdm

    from emojikit.api.errors import RemoteServiceError
    from emojikit.play.game import episode_to_json
    from emojikit.stages.interrupt import Interrupted, graceful_stop
    from emojikit.support.io import atomic_write_text
    from emojikit.api.policy import SamplingParams
    from emojikit.training.sft import batch_indices

    g: GRPOSettings = recipe.settings["grpo"]
    game = recipe.settings["game"]
    if g.max_turns is not None:
        game = game.model_copy(update={"max_turns": g.max_turns})

    start_ref = resolve_start(g)
    seen = sft_seen(start_ref)  # training targets whose teacher answers the start's SFT saw are left out
    heldout, train_targets = split_targets(recipe, g, run_dir, seen)
    backend = recipe.components["backend"]
    if start_ref is not None and "init_from" in type(backend.config).model_fields:
        backend = type(backend)(backend.table, backend.spec, backend.config.model_copy(update={"init_from": start_ref}))
    recipe.components["backend"] = backend
    judge = recipe.build("judge", run_dir.path)
    reward = recipe.build("reward", run_dir.path)
    require_beliefs(recipe, g, judge, reward)  # before the policy loads: a one-line error, fast
    policy = recipe.build("backend", run_dir.path)
    decoder = recipe.build("decoder", run_dir.path)
    add_candidates(judge, [m.text for m in heldout + train_targets])
    heldout_judge = held_out_judge(recipe, run_dir, judge, heldout)
    guided = guided_sender(recipe, g, policy, game, run_dir)
    credit = emoji_credit(g, judge, policy)
    print(f"sender starts from {start_ref or 'the base model'}; {len(train_targets)} training targets"
          f"{f' (none of the {len(seen)} messages its SFT trained on)' if seen else ''}, {len(heldout)} held out")
    atomic_write_text(run_dir.file("start.json"), json.dumps({"start": start_ref or "base"}) + "\n")  # what sweep compares against
    states = None
    if g.states == "repair":  # made by the start weights, before resume_policy loads a later step; reused on resume
        from emojikit.training.repair_states import train_states

        states = train_states(policy, decoder, judge, reward, train_targets, game, g.state_temperature, recipe.seed, run_dir, start_ref or "base", "grpo")

    start = run_dir.resume_policy(policy, (METRICS_FILE, EPISODES_FILE, EVAL_FILE))

    evaluate, evals = heldout_evaluations(
        run_dir, lambda: evaluate_game(policy, decoder, heldout_judge, reward, heldout, game, g.eval_temperature, recipe.seed))

    # The comparison at the end plays the start and the final checkpoint (with base and the
    # teacher); without it, the held-out game before and after is the run's own table.
    before_after = bool(heldout) and not g.compare
    if before_after:
        evaluate(0)

    stop_hint = recipe.resume_hint()  # repeats the --set values, so it works as printed
    failed_steps = 0  # consecutive steps in which every group was dropped
    with graceful_stop() as stop:
        bar = tqdm(range(start, g.steps), initial=start, total=g.steps, desc="grpo", unit="step")
        for step in bar:
            t0 = time.time()
            done = step + 1
            sampling = SamplingParams(max_tokens=game.max_new_tokens, temperature=g.temperature, seed=recipe.seed * 100_003 + step)
            totals = sample_totals(policy)  # a policy that redraws invalid samples (SampleTotals)
            fallbacks_before = guided.fallbacks if guided else 0
            if states is not None:
                step_states = draw_states(states, g.batch_size, step, recipe.seed)
                groups = repair_groups(policy, decoder, judge, reward, step_states, game, sampling, g.group_size)
            else:
                targets = [train_targets[i] for i in batch_indices(len(train_targets), g.batch_size, step, recipe.seed)]
                groups = play_groups(policy, decoder, judge, reward, targets, game, sampling, g.group_size, guided, g.teacher_episodes)
            t_play = time.time() - t0
            kept = drop_failed(groups)
            failed_steps = 0 if kept else failed_steps + 1
            per_group, skipped = group_datums(kept, g, game.max_new_tokens, credit, game.max_turns)

            row = {"step": done, "dropped_groups": len(groups) - len(kept), "skipped_groups": skipped}
            row.update(step_statistics(groups, kept, t_play) if states is None else repair_statistics(groups, kept, t_play))
            if states is not None:
                row["repeat_reward_mean"] = repeat_reward_mean(judge, reward, step_states)
            row.update(acceptance_between(totals, sample_totals(policy)))  # {} for a policy that masks
            if guided:
                row.update(guided_statistics(kept, g.teacher_episodes, guided.fallbacks - fallbacks_before))
            datums = [d for group in per_group for d in group]
            if datums:
                row["kl"] = fold_kl(policy, datums, temperature=g.temperature, decoder=decoder, kl_coef=g.kl_coef, center=g.kl_center)
                row.update(train(policy, per_group, g, decoder=decoder))
            row["datums"] = len(datums)
            row["step_seconds"] = time.time() - t0

            for i, group in enumerate(groups[: g.log_groups]):
                for ep in group.episodes:
                    run_dir.log(EPISODES_FILE, {"step": done, "group": i, **episode_to_json(ep)})
            if heldout and g.eval_every and done % g.eval_every == 0 and done != g.steps:
                held = evaluate(done)
                row["eval_success_rate"], row["eval_similarity"] = held["success_rate"], held["similarity"]
            run_dir.log(METRICS_FILE, row)
            if "reward_mean" in row:
                bar.set_postfix(reward=f"{row['reward_mean']:.3f}", success=f"{row['success_rate']:.2f}", kl=f"{row.get('kl', 0.0):.3f}")
            give_up = failed_steps >= g.max_failed_steps
            if (g.save_every and done % g.save_every == 0) or done == g.steps or stop or give_up:
                if before_after and done == g.steps:
                    evaluate(done)
                with run_dir.new_checkpoint(done) as tmp:
                    policy.save(str(tmp))
            if stop:
                bar.close()
                raise Interrupted(f"stopped by {stop.signal_name} after step {done} (checkpoint saved); {stop_hint}")
            if give_up:
                bar.close()
                raise RemoteServiceError(
                    f"the judge failed on every group for {failed_steps} steps in a row (steps {done - failed_steps + 1}-{done}); "
                    f"stopped after step {done} (checkpoint saved); once the service is back, {stop_hint}"
                )
        bar.close()

    if before_after and 0 in evals and g.steps in evals:
        table = before_after_table(evals[0], evals[g.steps])
        atomic_write_text(run_dir.file("before_after.md"), table)
        print(table)
    print(f"final adapter: {run_dir.checkpoint_path(g.steps)}")
    if g.compare:
        from emojikit.evaluation.comparison import write_comparison

        write_comparison(recipe, run_dir, start_ref, str(run_dir.checkpoint_path(g.steps)))


def require_beliefs(recipe, g: GRPOSettings, judge, reward) -> None:
    """The emoji credit, and a reward that says it reads the judge's belief (`uses_target_belief`),
    need a `TargetBelief` judge: without one they would silently count nothing."""
    from emojikit.api.components import TargetBelief
    from emojikit.api.errors import ConfigError

    if isinstance(judge, TargetBelief):
        return
    name = recipe.components["judge"].spec.name
    if g.emoji_credit:
        raise ConfigError(f"{recipe.path}: [grpo] emoji_credit: the judge `{name}` reports no belief in the target "
                          "(TargetBelief); use a retrieval judge or set emoji_credit = 0")
    if getattr(reward, "uses_target_belief", False):
        raise ConfigError(f"{recipe.path}: [reward] {recipe.components['reward'].spec.name}: it reads the judge's belief in the target, "
                          f"and the judge `{name}` reports none (TargetBelief); use a retrieval judge or set listener_weight = 0")


def emoji_credit(g: GRPOSettings, judge, policy):
    """The per-emoji credit of g.emoji_credit > 0 (require_beliefs checked the judge), or None."""
    from emojikit.training.credit import EmojiCredit

    return EmojiCredit(judge, policy.tokenizer) if g.emoji_credit else None


def guided_sender(recipe, g: GRPOSettings, policy, game, run_dir):
    """The GuidedSender of a recipe with teacher_episodes, else None."""
    if not g.teacher_episodes:
        return None
    from emojikit.play.teacher_sender import TeacherSender
    from emojikit.training.guidance import GuidedSender

    return GuidedSender(policy, TeacherSender(recipe.build("teacher", run_dir.path), game))


def guided_statistics(kept: list[Group], teacher_episodes: int, fallbacks: int) -> dict:
    """Success of the sender's own episodes and of the teacher-opened ones, and how many
    teacher answers the mask could not produce (played by the sender instead)."""
    own = [ep for group in kept for ep in group.episodes[: len(group.episodes) - teacher_episodes]]
    opened = [ep for group in kept for ep in group.episodes[len(group.episodes) - teacher_episodes :]]
    row: dict = {"teacher_fallbacks": fallbacks}
    if own and opened:
        row["own_success_rate"] = statistics.fmean(ep.success for ep in own)
        row["guided_success_rate"] = statistics.fmean(ep.success for ep in opened)
    return row


def reward_parts(episodes: list[Episode]) -> dict:
    """Mean and std over the step's episodes of each part of the reward's breakdown but the
    total (that is reward_mean and reward_std): reward/<part>_mean, reward/<part>_std (0 where
    an episode's breakdown lacks the part)."""
    parts = sorted({key for ep in episodes for key in ep.reward if key != "total"})
    row: dict = {}
    for part in parts:
        values = [float(ep.reward.get(part, 0.0)) for ep in episodes]
        row[f"reward/{part}_mean"], row[f"reward/{part}_std"] = statistics.fmean(values), statistics.pstdev(values)
    return row


def step_statistics(groups: list[Group], kept: list[Group], play_seconds: float) -> dict:
    """Reward, success and sampling figures of one step's episodes."""
    row: dict = {}
    rewards = [r for group in kept for r in group.rewards]
    if rewards:
        episodes = [ep for group in kept for ep in group.episodes]
        row.update(reward_mean=statistics.fmean(rewards), reward_std=statistics.pstdev(rewards), **summarize(episodes))
        row.update(reward_parts(episodes))
    else:
        row["failed_step"] = True
    sampled = [t.sample for group in groups for ep in group.episodes for t in ep.turns if t.sample is not None]
    n_sampled = sum(len(s.tokens) for s in sampled)
    row["entropy_estimate"] = -sum(lp for s in sampled for lp in s.logprobs) / max(n_sampled, 1)  # mean sampled-token NLL
    row["sampled_tokens_per_s"] = n_sampled / max(play_seconds, 1e-9)
    row["play_seconds"] = play_seconds
    return row


def repair_statistics(groups: list[Group], kept: list[Group], play_seconds: float) -> dict:
    """step_statistics of repair states, about their turn-2 answers: success_rate is the share
    of answers that win, similarity and format_violations are those of the answers; the
    game's per-turn figures (mean_turns, first_turn_*, repair_*) mean nothing for one turn."""
    row = step_statistics(groups, kept, play_seconds)
    for key in ("mean_turns", "first_turn_success", "first_turn_similarity", "first_turn_misses", "repair_rate", "repair_wins"):
        row.pop(key, None)
    answers = [ep.turns[-1] for group in kept for ep in group.episodes]
    if answers:
        row["format_violations"] = statistics.fmean(not turn.valid for turn in answers)
    return row


def repeat_reward_mean(judge, reward, states) -> float:
    """Mean reward of sending turn 1 again on the step's states (the repair every sender has),
    over the states the judge answered; 0.0 when it answered none."""
    from emojikit.training.repair_states import repeat_baselines

    judged = [b for b in repeat_baselines(judge, reward, states) if b != float("inf")]
    return statistics.fmean(judged) if judged else 0.0


def before_after_table(before: dict, after: dict) -> str:
    lines = [f"Held-out game, {before['targets']} targets (same targets, judge and seed):", "",
             "| | success rate | first-turn success | repair rate (turn-2 wins / first-turn misses) | mean similarity | mean turns | format violations |", "|---|---|---|---|---|---|---|"]
    for label, row in (("before", before), ("after", after)):
        # eval.jsonl rows of runs made before the turns were reported apart have no repair figures
        first = f"{row['first_turn_success']:.3f}" if "first_turn_success" in row else "-"
        repair = f"{row['repair_rate']:.3f} ({row['repair_wins']}/{row['first_turn_misses']})" if "repair_rate" in row else "-"
        lines.append(f"| {label} | {row['success_rate']:.3f} | {first} | {repair} | {row['similarity']:.3f} | {row['mean_turns']:.2f} | {row['format_violations']:.3f} |")
    return "\n".join(lines) + "\n"


def preflight(recipe) -> None:
    """What run() would reject, before a run directory is made: a token budget too small for
    the decoder's shortest answer (every answer would be empty), a held-out file that is missing
    or has a bad line, a comparison reader that does not build."""
    from emojikit.api.errors import ConfigError
    from emojikit.composition.preflight import token_budget_problem
    from emojikit.evaluation.comparison import reader_recipe
    from emojikit.play.targets import check_target_files
    from emojikit.stages.pipeline import upstream_run_dirs

    problem = token_budget_problem(recipe, recipe.settings["game"].max_new_tokens, "[game] max_new_tokens")
    if problem:
        raise ConfigError(f"{recipe.path}: {problem}")
    check_target_files(recipe, recipe.settings["grpo"], upstream_run_dirs(recipe))

    for name in recipe.settings["grpo"].compare_judges:
        reader_recipe(recipe, name)  # an unknown judge, or settings it rejects: one line now, not after training
    if recipe.settings["grpo"].teacher_episodes and "teacher" not in recipe.components:
        raise ConfigError(f"{recipe.path}: [grpo] teacher_episodes: needs a [teacher] table (the teacher whose answers open those episodes)")
