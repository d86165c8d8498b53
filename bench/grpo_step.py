"""One GRPO step, emojikit vs TRL's GRPOTrainer, on an identical single-turn configuration (CPU).

    python bench/grpo_step.py                      # table: seconds per step, peak RSS, ratios
    python bench/grpo_step.py --json               # one JSON object
    python bench/grpo_step.py --steps 2 --warmup 1 --prompts 2   # smoke run
    python bench/grpo_step.py --rounds 2           # emojikit, TRL, emojikit, TRL (pooled medians)

Both sides: SmolLM2-135M-Instruct (the dequantized fp32 copy emojikit.support.models caches),
LoRA rank 16 / alpha 32 on every linear projection, `prompts` chat prompts x 4 completions per
optimizer step, 32 new tokens at temperature 1, the same reward (`emoji_reward`: emoji count,
minus stray characters), PPO-clipped loss without KL, AdamW, fp32, no decoder mask (TRL has
none). emojikit's step is what emojikit/training/grpo.py does for one turn: sample -> reward ->
group-relative advantages -> datums -> forward_backward("ppo") -> optim_step; every group is
trained (grpo.py skips groups whose rewards are all equal; TRL does not, so neither does this).

Each side runs in its own subprocess so its peak RSS is its own; `--rounds` alternates them so
a burst of load from other processes hits both. Per step we record wall seconds and the
process's CPU seconds (less sensitive to other processes than wall time).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import MESSAGES, machine, peak_rss_mb  # noqa: E402

SYSTEM = "Reply with 2-8 emoji only."  # emojikit.training.data.SYSTEM_PROMPT, the game's first turn
LORA = {"r": 16, "lora_alpha": 32.0, "lora_dropout": 0.0, "target_modules": "all-linear"}
LEARNING_RATE = 1e-5


def chat(message: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": message}]


def step_prompts(step: int, n_prompts: int) -> list[list[dict[str, str]]]:
    """The step's prompts: a sliding window over MESSAGES (both sides see the same ones)."""
    return [chat(MESSAGES[(step * n_prompts + i) % len(MESSAGES)]) for i in range(n_prompts)]


def emoji_reward(text: str) -> float:
    """Emoji count (capped at 8) / 8, minus 0.05 per non-emoji character: cheap, deterministic."""
    from emojikit.api import emojis

    found, rest = emojis.parse(text)
    return min(len(found), 8) / 8 - 0.05 * len(rest)


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# --- the emojikit side ---------------------------------------------------------------------


def run_emojikit(args) -> dict:
    import torch

    from emojikit.training.grpo import group_advantages
    from emojikit.api.policy import AdamParams, Datum, SamplingParams
    from emojikit_local.config import LocalConfig
    from emojikit.support.models import load_model_and_tokenizer
    from emojikit_local.policy import LocalPolicy

    config = LocalConfig(lora_rank=LORA["r"], lora_alpha=LORA["lora_alpha"], lora_dropout=LORA["lora_dropout"], seed=0, **({"threads": args.threads} if args.threads else {}), **json.loads(args.emojikit_config))
    if config.threads:
        torch.set_num_threads(config.threads)
    model, tokenizer = load_model_and_tokenizer(config.model, device="cpu")  # fp32: the policy casts for dtype = "bfloat16"
    policy = LocalPolicy(model, tokenizer, config, seed=0)
    steps = []
    for step in range(args.warmup + args.steps):
        wall0, cpu0 = time.perf_counter(), cpu_seconds()
        phases = {}
        t = time.perf_counter()
        groups = policy.sample(step_prompts(step, args.prompts), args.completions, SamplingParams(max_tokens=args.new_tokens, temperature=1.0, seed=step))
        phases["sample"] = time.perf_counter() - t
        t = time.perf_counter()
        datums = []
        for group in groups:
            rewards_G = [emoji_reward(s.text) for s in group]
            for sample, advantage in zip(group, group_advantages(rewards_G, normalize_std=True)):
                datums.append(Datum.from_sample(sample, advantage=advantage))
        phases["reward"] = time.perf_counter() - t
        t = time.perf_counter()
        policy.forward_backward(datums, "ppo", temperature=1.0)
        phases["forward_backward"] = time.perf_counter() - t
        t = time.perf_counter()
        policy.optim_step(AdamParams(learning_rate=LEARNING_RATE))
        phases["optim_step"] = time.perf_counter() - t
        steps.append({"wall_s": time.perf_counter() - wall0, "cpu_s": cpu_seconds() - cpu0, "completion_tokens": sum(len(s.tokens) for g in groups for s in g), **phases})
    return {"side": "emojikit", "torch_threads": torch.get_num_threads(), "steps": steps[args.warmup :], "peak_rss_mb": peak_rss_mb()}


# --- the TRL side --------------------------------------------------------------------------


def run_trl(args) -> dict:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from emojikit.support.bundled import SMOLLM2
    from emojikit.support.models import clear_quantization_markers, load_model_and_tokenizer

    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_model_and_tokenizer(SMOLLM2, device="cpu")
    clear_quantization_markers(model)  # already done by load_model; TRL refuses the GGUF flags
    model.train()
    total_steps = args.warmup + args.steps
    rows = [{"prompt": p} for step in range(total_steps) for p in step_prompts(step, args.prompts)]

    def reward_fn(completions, **_):
        return [emoji_reward(c[0]["content"] if isinstance(c, list) else c) for c in completions]

    batch = args.prompts * args.completions
    config = GRPOConfig(
        output_dir=str(Path(args.tmp) / "trl"),
        use_cpu=True,
        bf16=False,
        fp16=False,
        gradient_checkpointing=args.trl_gradient_checkpointing,
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=1,
        num_generations=args.completions,
        max_completion_length=args.new_tokens,
        temperature=1.0,
        top_p=1.0,
        beta=0.0,
        epsilon=0.2,
        learning_rate=LEARNING_RATE,
        max_steps=total_steps,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        shuffle_dataset=False,
        dataloader_num_workers=0,
        seed=0,
        disable_tqdm=True,
    )
    timings: list[dict] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *_, **__):
            timings.append({"wall0": time.perf_counter(), "cpu0": cpu_seconds(), "generate": 0.0})

        def on_step_end(self, *_, **__):
            row = timings[-1]
            row["wall_s"] = time.perf_counter() - row.pop("wall0")
            row["cpu_s"] = cpu_seconds() - row.pop("cpu0")

    class TimedGRPOTrainer(GRPOTrainer):
        def _generate_and_score_completions(self, inputs):
            t = time.perf_counter()
            try:
                return super()._generate_and_score_completions(inputs)
            finally:
                if timings:
                    timings[-1]["generate"] += time.perf_counter() - t

    trainer = TimedGRPOTrainer(
        model=model,
        reward_funcs=reward_fn,
        args=config,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        peft_config=LoraConfig(task_type="CAUSAL_LM", **LORA),
        callbacks=[StepTimer()],
    )
    trainer.train()
    steps = [{**t, "train": t["wall_s"] - t["generate"]} for t in timings]
    return {"side": "trl", "torch_threads": torch.get_num_threads(), "steps": steps[args.warmup :], "peak_rss_mb": peak_rss_mb()}


# --- driver --------------------------------------------------------------------------------


def run_side(side: str, args) -> dict:
    """Run one side in a fresh interpreter (clean peak RSS) and read its JSON line."""
    cmd = [sys.executable, __file__, "--side", side, "--steps", str(args.steps), "--warmup", str(args.warmup), "--prompts", str(args.prompts), "--completions", str(args.completions), "--new-tokens", str(args.new_tokens), "--threads", str(args.threads), "--emojikit-config", args.emojikit_config, "--tmp", args.tmp]
    if args.trl_gradient_checkpointing:
        cmd.append("--trl-gradient-checkpointing")
    done = subprocess.run(cmd, capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{side} side failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(lines[-1])


def summarize(runs: list[dict]) -> dict:
    steps = [s for r in runs for s in r["steps"]]
    out = {
        "step_s_median": round(statistics.median(s["wall_s"] for s in steps), 2),
        "step_cpu_s_median": round(statistics.median(s["cpu_s"] for s in steps), 2),
        "step_s_all": [round(s["wall_s"], 2) for s in steps],
        "peak_rss_mb": round(max(r["peak_rss_mb"] for r in runs), 0),
        "torch_threads": runs[0]["torch_threads"],
    }
    for phase in ("sample", "reward", "forward_backward", "optim_step", "generate", "train"):
        if phase in steps[0]:
            out[f"{phase}_s_median"] = round(statistics.median(s[phase] for s in steps), 2)
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5, help="timed steps per round (median over all)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    parser.add_argument("--prompts", type=int, default=8, help="prompts per step")
    parser.add_argument("--completions", type=int, default=4, help="completions per prompt (the group)")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="torch threads for both sides (0: torch's default)")
    parser.add_argument("--rounds", type=int, default=1, help="alternate emojikit and TRL this many times")
    parser.add_argument("--sides", default="emojikit,trl")
    parser.add_argument("--trl-gradient-checkpointing", action="store_true", help="TRL 1.x's default; slower, less memory")
    parser.add_argument("--emojikit-config", default="{}", help="extra LocalConfig fields as JSON, e.g. '{\"sample_dtype\": \"bfloat16\"}'")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--side", help=argparse.SUPPRESS)
    parser.add_argument("--tmp", default="/tmp/emojikit-bench-grpo", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.side:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        result = run_emojikit(args) if args.side == "emojikit" else run_trl(args)
        print(json.dumps(result))
        return

    sides = args.sides.split(",")
    before = machine()
    runs: dict[str, list[dict]] = {s: [] for s in sides}
    for _ in range(args.rounds):
        for side in sides:
            runs[side].append(run_side(side, args))
    result = {
        "config": {"prompts": args.prompts, "completions": args.completions, "new_tokens": args.new_tokens, "steps": args.steps, "warmup": args.warmup, "rounds": args.rounds, "threads": args.threads, "trl_gradient_checkpointing": args.trl_gradient_checkpointing, "emojikit_config": json.loads(args.emojikit_config)},
        "machine": {**before, "load_avg_1m_after": round(os.getloadavg()[0], 2)},
        **{side: summarize(r) for side, r in runs.items()},
    }
    if "emojikit" in runs and "trl" in runs:
        e, t = result["emojikit"], result["trl"]
        result["ratios"] = {
            "time": round(e["step_s_median"] / t["step_s_median"], 3),
            "cpu_time": round(e["step_cpu_s_median"] / t["step_cpu_s_median"], 3),
            "peak_rss": round(e["peak_rss_mb"] / t["peak_rss_mb"], 3),
        }
    if args.json:
        print(json.dumps(result))
        return
    print(f"machine: {result['machine']}")
    print(f"config: {result['config']}")
    keys = ["step_s_median", "step_cpu_s_median", "peak_rss_mb", "sample_s_median", "generate_s_median", "forward_backward_s_median", "optim_step_s_median", "train_s_median", "step_s_all"]
    print(f"{'':28}" + "".join(f"{s:>22}" for s in sides))
    for key in keys:
        if any(key in result[s] for s in sides):
            print(f"{key:28}" + "".join(f"{str(result[s].get(key, '-')):>22}" for s in sides))
    if "ratios" in result:
        print(f"emojikit / TRL: time {result['ratios']['time']}x, CPU time {result['ratios']['cpu_time']}x, peak RSS {result['ratios']['peak_rss']}x")


if __name__ == "__main__":
    main()
