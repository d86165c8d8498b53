"""The learning probe: emojikit's GRPO loop vs TRL's GRPOTrainer on a trivially learnable reward.

    python bench/learning_probe.py                          # both sides from the base model, table + PNG
    python bench/learning_probe.py --start runs/sft/checkpoints/step_250
    python bench/learning_probe.py --sides emojikit --steps 4   # smoke run

The reward is the share of sent emoji whose emojilib keywords include "animal" (the
`keyword-share` reward; 127 animal emoji). Both sides: SmolLM2-135M-Instruct (from the base
model or the same LoRA checkpoint), the same prompts in the same order (recipes/learning-probe.toml's
training targets with the game's system prompt), `batch` prompts x `group` completions per
optimizer step, 24 new tokens at temperature 1, PPO-clipped loss without KL, AdamW at the same
learning rate, fp32. emojikit runs the real CLI (`emojikit run recipes/learning-probe.toml`)
with its emoji mask; TRL has no mask, so its completions may hold text, which earns nothing
(the share counts emoji only, and text-only answers score 0).

Reported per step: mean reward of that step's episodes, episodes so far, and training seconds
so far (model loading excluded on both sides). A PNG plots reward against episodes and seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, parser, print_header  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "learning-probe.toml"


def probe_recipe(args):
    from emojikit.composition.recipe import load_recipe

    return load_recipe(RECIPE, [f"grpo.steps={args.steps}", f"grpo.batch_size={args.batch}", f"grpo.group_size={args.group}",
                                f"grpo.learning_rate={args.lr}", f"seed={args.seed}"])


def run_emojikit(args, out: Path) -> list[dict]:
    cmd = [str(ROOT / ".venv" / "bin" / "emojikit"), "run", str(RECIPE), "--set", f"out={out}", "--set", f"grpo.steps={args.steps}",
           "--set", f"grpo.batch_size={args.batch}", "--set", f"grpo.group_size={args.group}", "--set", f"grpo.learning_rate={args.lr}",
           "--set", f"seed={args.seed}", "--set", f"grpo.start_from={args.start}"]
    if args.threads:
        cmd += ["--set", f"backend.threads={args.threads}"]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"emojikit side failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    curve, seconds = [], 0.0
    for row in rows:
        seconds += row["step_seconds"]
        curve.append({"step": row["step"], "reward": row["reward_mean"], "episodes": row["step"] * args.batch * args.group, "seconds": seconds})
    return curve


def run_trl(args) -> list[dict]:
    """TRL's GRPOTrainer on the same prompts, reward, LoRA start and hyperparameters."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig, PeftModel
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from emojikit.support.bundled import SMOLLM2
    from emojikit.play.game import GameSettings, sender_prompt
    from emojikit.play.targets import split_targets
    from emojikit.training.sft import batch_indices
    from emojikit_local.config import LocalConfig
    from emojikit.support.models import clear_quantization_markers, load_model_and_tokenizer
    from emojikit_retrieval.probe import KeywordShareReward

    if args.threads:
        torch.set_num_threads(args.threads)
    recipe = probe_recipe(args)
    g, game = recipe.settings["grpo"], recipe.settings["game"]

    class _RunDir:  # split_targets only needs a path for the prompt source
        path = Path(args.tmp)

    _, train = split_targets(recipe, g, _RunDir())
    rows = [{"prompt": sender_prompt(game, train[i].text, [])} for step in range(args.steps) for i in batch_indices(len(train), args.batch, step, recipe.seed)]

    model, tokenizer = load_model_and_tokenizer(SMOLLM2, device="cpu")
    clear_quantization_markers(model)
    local = LocalConfig()
    peft_config = None
    if args.start == "base":
        peft_config = LoraConfig(task_type="CAUSAL_LM", r=local.lora_rank, lora_alpha=local.lora_alpha, lora_dropout=0.0, target_modules=local.target_modules)
    else:
        model = PeftModel.from_pretrained(model, args.start, is_trainable=True)
    model.train()
    reward = KeywordShareReward("animal")

    def reward_fn(completions, **_):
        return [reward.share(c[0]["content"] if isinstance(c, list) else c) for c in completions]

    config = GRPOConfig(
        output_dir=str(Path(args.tmp) / "trl"), use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False,
        per_device_train_batch_size=args.batch * args.group, gradient_accumulation_steps=1, num_generations=args.group,
        max_completion_length=game.max_new_tokens, temperature=1.0, top_p=1.0, beta=0.0, epsilon=0.2, learning_rate=args.lr,
        lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0,
        max_steps=args.steps, logging_steps=1, save_strategy="no", report_to="none", shuffle_dataset=False,
        dataloader_num_workers=0, seed=args.seed, disable_tqdm=True,
    )
    seconds: list[float] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *_, **__):
            self.t0 = time.perf_counter()

        def on_step_end(self, *_, **__):
            seconds.append(time.perf_counter() - self.t0)

    trainer = GRPOTrainer(model=model, reward_funcs=reward_fn, args=config, train_dataset=Dataset.from_list(rows),
                          processing_class=tokenizer, peft_config=peft_config, callbacks=[StepTimer()])
    trainer.train()
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    curve, total = [], 0.0
    for step, (r, s) in enumerate(zip(rewards, seconds), start=1):
        total += s
        curve.append({"step": step, "reward": r, "episodes": step * args.batch * args.group, "seconds": total})
    return curve


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for side, curve in result["curves"].items():
        for ax, x in zip(axes, ("episodes", "seconds")):
            ax.plot([p[x] for p in curve], [p["reward"] for p in curve], marker="o", ms=3, label=side)
    for ax, x in zip(axes, ("episodes", "training seconds")):
        ax.set_xlabel(x)
        ax.set_ylabel("mean reward (animal share)")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(f"learning probe from {result['config']['start']}: {result['config']['batch']}x{result['config']['group']} episodes per step, lr {result['config']['lr']}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None) -> None:
    p = parser(__doc__, threads=0)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--batch", type=int, default=8, help="prompts per step")
    p.add_argument("--group", type=int, default=4, help="completions per prompt")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--start", default="base", help='"base" or a LoRA checkpoint directory (both sides start there)')
    p.add_argument("--sides", default="emojikit,trl")
    p.add_argument("--plot", type=Path, default=ROOT / "docs" / "img" / "learning_probe.png")
    p.add_argument("--side", help="internal: run one side and print its curve as JSON")
    p.add_argument("--tmp", default=None)
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    if args.side == "trl":
        print(json.dumps(run_trl(args)))
        return
    tmp = Path(args.tmp or tempfile.mkdtemp(prefix="emojikit-probe-"))
    result = {"machine": machine(), "config": {k: getattr(args, k) for k in ("steps", "batch", "group", "lr", "start", "threads", "seed")}, "curves": {}}
    for side in args.sides.split(","):
        if side == "emojikit":
            result["curves"]["emojikit"] = run_emojikit(args, tmp / f"emojikit-{int(time.time())}")
        else:
            cmd = [sys.executable, __file__, "--side", "trl", "--tmp", str(tmp)] + [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--json"]
            done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
            lines = [line for line in done.stdout.splitlines() if line.startswith("[")]
            if done.returncode != 0 or not lines:
                raise SystemExit(f"trl side failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
            result["curves"]["trl"] = json.loads(lines[-1])
    result["machine"]["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
    if args.plot:
        plot(result, args.plot)
    if print_header(result, args.json):
        return
    sides = list(result["curves"])
    print("step  episodes  " + "  ".join(f"{s + ' reward':>16}{s + ' s':>12}" for s in sides))
    for i in range(max(len(c) for c in result["curves"].values())):
        cells = []
        for s in sides:
            c = result["curves"][s]
            cells.append(f"{c[i]['reward']:16.3f}{c[i]['seconds']:12.1f}" if i < len(c) else f"{'-':>16}{'-':>12}")
        print(f"{i + 1:4d}  {(i + 1) * args.batch * args.group:8d}  " + "  ".join(cells))
    if args.plot:
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
