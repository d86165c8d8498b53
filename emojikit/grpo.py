"""GRPO on the retrieval game: one loop against Policy, readable top to bottom.

Each step: targets -> group_size episodes per target in one batched game -> rewards ->
group-relative advantages -> datums (only the sender's tokens of every turn carry the
advantage) -> KL against the start policy -> forward_backward -> optim_step -> metrics.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Literal, Optional

from pydantic import Field, field_validator

from emojikit.config import ConfigModel

EPISODES_FILE = "episodes.jsonl"
METRICS_FILE = "metrics.jsonl"
EVAL_FILE = "eval.jsonl"


class GRPOSettings(ConfigModel):
    steps: int = Field(20, ge=1)
    batch_size: int = Field(8, ge=1, description="Targets per step.")
    group_size: int = Field(4, ge=2, description="Episodes per target; advantages are relative within a group.")
    max_turns: Optional[int] = Field(None, ge=1, description="Overrides [game] max_turns for training and evaluation.")
    learning_rate: float = Field(1e-4, gt=0)
    temperature: float = Field(1.0, gt=0, description="Sender temperature while training (the trainer scores with the same).")
    kl_coef: float = Field(0.0, ge=0, description="Penalty per token on log(pi/pi_start), folded into the advantages.")
    loss: Literal["ppo", "importance_sampling"] = "ppo"
    clip: float = Field(0.2, gt=0, description="PPO clip range.")
    normalize_std: bool = Field(True, description="Divide advantages by the group's reward std.")
    start_from: str = Field("auto", description='"auto" (the sft_run checkpoint if present, else base), "base", or a checkpoint path.')
    sft_run: Path = Field(Path("runs/sft"), description="Run directory whose latest checkpoint start_from=auto uses.")
    eval_targets: int = Field(32, ge=0, description="Held-out targets (taken first from the prompt source, never trained on).")
    eval_every: int = Field(0, ge=0, description="Held-out game every N steps (0: only before and after).")
    eval_temperature: float = Field(0.3, gt=0)
    save_every: int = Field(0, ge=0, description="Checkpoint every N steps (0: only at the end).")
    log_groups: int = Field(2, ge=0, description="Groups per step written whole to episodes.jsonl.")
    target_pool: int = Field(2000, ge=1, description="Training targets drawn from the prompt source.")
    max_failed_steps: int = Field(
        3, ge=1, description="Stop (with a checkpoint) after this many steps in a row in which the judge failed on every group."
    )

    @field_validator("start_from")
    @classmethod
    def _start_exists(cls, value: str) -> str:
        if value not in ("auto", "base") and "://" not in value and not Path(value).is_dir():
            raise ValueError(f'{value} is not a checkpoint directory (or use "auto" or "base")')
        return value


def group_advantages(rewards_G: list[float], normalize_std: bool) -> list[float]:
    """Mean-centred rewards of one group, optionally divided by their std."""
    mean = sum(rewards_G) / len(rewards_G)
    centred = [r - mean for r in rewards_G]
    if normalize_std:
        std = statistics.pstdev(rewards_G)
        centred = [c / (std + 1e-6) for c in centred]
    return centred


def episode_datums(episode, advantage: float, budget: int) -> list:
    """One datum per turn: the turn's prompt plus the sender's tokens, which carry the advantage."""
    from emojikit.policy import Datum

    return [Datum.from_sample(turn.sample, advantage=advantage, decoded=True, decode_budget=budget) for turn in episode.turns if turn.sample is not None]


def resolve_start(settings: GRPOSettings) -> Optional[str]:
    if settings.start_from == "base":
        return None
    if settings.start_from != "auto":
        return settings.start_from
    checkpoints = settings.sft_run / "checkpoints"
    steps = sorted((int(p.name[5:]), p) for p in checkpoints.glob("step_*") if p.name[5:].isdigit()) if checkpoints.exists() else []
    return str(steps[-1][1]) if steps else None


def summarize(episodes) -> dict:
    n = max(len(episodes), 1)
    turns = [t for ep in episodes for t in ep.turns]
    return {
        "success_rate": sum(ep.success for ep in episodes) / n,
        "similarity": sum(ep.turns[-1].similarity for ep in episodes if ep.turns) / n,
        "mean_turns": sum(len(ep.turns) for ep in episodes) / n,
        "format_violations": sum(not t.valid for t in turns) / max(len(turns), 1),
    }


def evaluate_game(policy, decoder, judge, reward, targets, game_settings, temperature: float, seed: int) -> dict:
    from emojikit.game import play
    from emojikit.policy import SamplingParams

    sampling = SamplingParams(max_tokens=game_settings.max_new_tokens, temperature=temperature, seed=seed)
    episodes = play(policy, decoder, judge, reward, targets, settings=game_settings, sampling=sampling, group_size=1)
    reward.score(episodes)
    return {"targets": len(targets), **summarize(episodes), "failed_episodes": sum(ep.failed for ep in episodes)}


def run(recipe, run_dir) -> None:
    from tqdm import tqdm

    from emojikit.errors import RemoteServiceError
    from emojikit.game import episode_to_json, play
    from emojikit.interrupt import Interrupted, graceful_stop
    from emojikit.policy import AdamParams, SamplingParams
    from emojikit.sft import batch_indices

    g: GRPOSettings = recipe.settings["grpo"]
    game = recipe.settings["game"]
    if g.max_turns is not None:
        game = game.model_copy(update={"max_turns": g.max_turns})

    messages = list(recipe.build("prompts", run_dir.path).messages(g.eval_targets + g.target_pool))
    heldout, train = messages[: g.eval_targets], messages[g.eval_targets :]
    if not train:
        from emojikit.errors import ConfigError

        raise ConfigError(f"{recipe.path}: [grpo] eval_targets: the prompt source gave {len(messages)} messages, none left for training")

    start_ref = resolve_start(g)
    backend = recipe.components["backend"]
    if start_ref is not None and "init_from" in type(backend.config).model_fields:
        backend = type(backend)(backend.table, backend.spec, backend.config.model_copy(update={"init_from": start_ref}))
    recipe.components["backend"] = backend
    policy = recipe.build("backend", run_dir.path)
    decoder = recipe.build("decoder", run_dir.path)
    judge = recipe.build("judge", run_dir.path)
    reward = recipe.build("reward", run_dir.path)
    if hasattr(judge, "add_candidates"):
        judge.add_candidates([m.text for m in messages])
    print(f"sender starts from {start_ref or 'the base model'}; {len(train)} training targets, {len(heldout)} held out")

    start = run_dir.resume_policy(policy, (METRICS_FILE, EPISODES_FILE, EVAL_FILE))

    evals = {row["step"]: row for row in run_dir.read(EVAL_FILE)}
    if heldout and 0 not in evals:
        evals[0] = {"step": 0, **evaluate_game(policy, decoder, judge, reward, heldout, game, g.eval_temperature, recipe.seed)}
        run_dir.log(EVAL_FILE, evals[0])

    stop_hint = f"resume with: emojikit run {recipe.path} --resume"
    failed_steps = 0  # consecutive steps in which every group was dropped
    with graceful_stop() as stop:
        bar = tqdm(range(start, g.steps), initial=start, total=g.steps, desc="grpo", unit="step")
        for step in bar:
            t0 = time.time()
            batch = [train[i] for i in batch_indices(len(train), g.batch_size, step, recipe.seed)]
            sampling = SamplingParams(max_tokens=game.max_new_tokens, temperature=g.temperature, seed=recipe.seed * 100_003 + step)
            episodes = play(policy, decoder, judge, reward, batch, settings=game, sampling=sampling, group_size=g.group_size)
            t_play = time.time() - t0
            groups = [episodes[i * g.group_size : (i + 1) * g.group_size] for i in range(len(batch))]
            # A group with an episode the judge could not answer is dropped whole: its
            # advantages would be relative to rewards that were never measured.
            kept = [group for group in groups if not any(ep.failed for ep in group)]
            failed_steps = 0 if kept else failed_steps + 1

            # Group-relative advantages; a group whose rewards are all equal teaches nothing.
            datums, skipped_groups, rewards = [], 0, []
            for group in kept:
                rewards_G = [ep.reward["total"] for ep in group]  # scored by play
                rewards.extend(rewards_G)
                if max(rewards_G) - min(rewards_G) < 1e-9:
                    skipped_groups += 1
                    continue
                for episode, advantage in zip(group, group_advantages(rewards_G, g.normalize_std)):
                    datums.extend(episode_datums(episode, advantage, game.max_new_tokens))

            row = {"step": step + 1, "dropped_groups": len(groups) - len(kept), "skipped_groups": skipped_groups}
            if rewards:
                kept_episodes = [ep for group in kept for ep in group]
                row.update(reward_mean=statistics.fmean(rewards), reward_std=statistics.pstdev(rewards), **summarize(kept_episodes))
            else:
                row["failed_step"] = True
            sampled = [t.sample for ep in episodes for t in ep.turns if t.sample is not None]
            n_sampled = sum(len(s.tokens) for s in sampled)
            row["entropy_estimate"] = -sum(lp for s in sampled for lp in s.logprobs) / max(n_sampled, 1)  # mean sampled-token NLL
            row["sampled_tokens_per_s"] = n_sampled / max(t_play, 1e-9)

            if datums:
                # KL to the start policy, per sender token, folded into the advantages.
                ref_logprobs = policy.compute_logprobs(datums, temperature=g.temperature, decoder=decoder, reference=True)
                kl_sum = kl_n = 0.0
                for d, ref in zip(datums, ref_logprobs):
                    for t, w in enumerate(d.weights):
                        if w:
                            kl = d.logprobs[t] - ref[t]
                            kl_sum, kl_n = kl_sum + kl, kl_n + 1
                            d.advantages[t] -= g.kl_coef * kl
                row["kl"] = kl_sum / max(kl_n, 1)
                out = policy.forward_backward(datums, g.loss, temperature=g.temperature, decoder=decoder, clip=g.clip)
                optim = policy.optim_step(AdamParams(learning_rate=g.learning_rate))
                row.update({"loss": out.loss, "trained_tokens": out.n_tokens, **out.metrics, **{f"optim/{k}": v for k, v in optim.items()}})
            row["datums"] = len(datums)
            row["step_seconds"] = time.time() - t0

            done = step + 1
            for i in range(min(g.log_groups, len(batch))):
                for ep in episodes[i * g.group_size : (i + 1) * g.group_size]:
                    run_dir.log(EPISODES_FILE, {"step": done, "group": i, **episode_to_json(ep)})
            if heldout and g.eval_every and done % g.eval_every == 0 and done != g.steps:
                evals[done] = {"step": done, **evaluate_game(policy, decoder, judge, reward, heldout, game, g.eval_temperature, recipe.seed)}
                run_dir.log(EVAL_FILE, evals[done])
                row["eval_success_rate"], row["eval_similarity"] = evals[done]["success_rate"], evals[done]["similarity"]
            run_dir.log(METRICS_FILE, row)
            if rewards:
                bar.set_postfix(reward=f"{row['reward_mean']:.3f}", success=f"{row['success_rate']:.2f}")
            give_up = failed_steps >= g.max_failed_steps
            if (g.save_every and done % g.save_every == 0) or done == g.steps or stop or give_up:
                if heldout and done == g.steps and done not in evals:
                    evals[done] = {"step": done, **evaluate_game(policy, decoder, judge, reward, heldout, game, g.eval_temperature, recipe.seed)}
                    run_dir.log(EVAL_FILE, evals[done])
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

    if heldout and g.steps in evals:
        table = before_after_table(evals[0], evals[g.steps])
        from emojikit.io import atomic_write_text

        atomic_write_text(run_dir.file("before_after.md"), table)
        print(table)
    print(f"final adapter: {run_dir.checkpoint_path(g.steps)}")


def before_after_table(before: dict, after: dict) -> str:
    lines = [f"Held-out game, {before['targets']} targets (same targets, judge and seed):", "", "| | success rate | mean similarity | mean turns | format violations |", "|---|---|---|---|---|"]
    for label, row in (("before", before), ("after", after)):
        lines.append(f"| {label} | {row['success_rate']:.3f} | {row['similarity']:.3f} | {row['mean_turns']:.2f} | {row['format_violations']:.3f} |")
    return "\n".join(lines) + "\n"
