"""Is a training update better than a random one of its size? Held-out game of start, final and noise.

For each noise seed, a checkpoint is written whose adapter is the start's plus Gaussian noise
scaled, tensor by tensor, to the RMS of (final - start). All checkpoints then play the same
held-out targets (`emojikit eval`, same judge and seed). A final checkpoint that loses to its own
noise twins has learned a direction that hurts the held-out game; one that matches them moved
by noise; one that beats them learned something.

  python bench/update_vs_noise.py runs/sft/checkpoints/step_250 runs/grpo/checkpoints/step_8 \
      --targets recipes/targets/heldout.jsonl -n 128 --noise-seeds 0,1 --threads 1
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, parser  # noqa: E402

ADAPTER = "adapter_model.safetensors"
TRAINING_STATE = {ADAPTER, "optimizer.pt", "rng.pt", "trainer_state.json"}  # a noise twin has weights only


def noise_twin(start: Path, final: Path, out: Path, seed: int) -> float:
    """Write start + noise (per-tensor RMS of final - start) to out; returns |final - start| / |start|."""
    import torch
    from safetensors.torch import load_file, save_file

    a, b = load_file(str(start / ADAPTER)), load_file(str(final / ADAPTER))
    if a.keys() != b.keys():
        raise SystemExit(f"{start} and {final}: the adapters hold different tensors (not one run's start and end)")
    generator = torch.Generator().manual_seed(seed)
    twin, moved, norm = {}, 0.0, 0.0
    for name, weight in a.items():
        delta = b[name].float() - weight.float()
        noise = torch.randn(weight.shape, generator=generator)
        twin[name] = (weight.float() + noise * (delta.pow(2).mean().sqrt() / noise.pow(2).mean().sqrt())).to(weight.dtype)
        moved, norm = moved + delta.pow(2).sum().item(), norm + weight.float().pow(2).sum().item()
    out.mkdir(parents=True, exist_ok=True)
    for f in start.iterdir():
        if f.is_file() and f.name not in TRAINING_STATE:
            shutil.copy(f, out / f.name)
    save_file(twin, str(out / ADAPTER))
    return (moved / norm) ** 0.5


def main() -> None:
    ap = parser(__doc__, threads=0)
    ap.add_argument("start", type=Path)
    ap.add_argument("final", type=Path)
    ap.add_argument("--targets", type=Path, default=Path("recipes/targets/heldout.jsonl"))
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--noise-seeds", default="0,1")
    ap.add_argument("--recipe", type=Path, default=Path("recipes/eval.toml"))
    ap.add_argument("--judge", default="retrieval")
    ap.add_argument("--out", type=Path, default=Path("runs/update-vs-noise"))
    ap.add_argument("--set", dest="sets", action="append", default=["game.max_turns=2", "judge.distractors=128"], help="passed to emojikit eval (default: 2 turns and 128 distractors, as the main job's comparison)")
    args = ap.parse_args()
    for path in (args.start, args.final):
        if not (path / ADAPTER).is_file():
            raise SystemExit(f"{path}: not a checkpoint directory (no {ADAPTER})")

    twins, relative = [], 0.0
    for seed in (int(s) for s in args.noise_seeds.split(",")):
        twin = args.out / f"noise-seed{seed}" / "checkpoints" / args.final.name
        relative = noise_twin(args.start, args.final, twin, seed)
        twins.append(twin)
    command = [sys.executable, "-m", "emojikit.ui.cli", "eval", "--recipe", str(args.recipe), "--judge", args.judge,
               "--targets", str(args.targets), "-n", str(args.n), "--out", str(args.out), "--set", f"seed={args.seed}",
               *[a for c in [args.start, args.final, *twins] for a in ("--checkpoint", str(c))]]
    command += [a for value in args.sets for a in ("--set", value)]
    if args.threads:
        command += ["--set", f"backend.threads={args.threads}"]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env={**os.environ, "TQDM_DISABLE": "1"})
    rows = json.loads((args.out / "eval.json").read_text())["checkpoints"]
    success = {name: row["masked"]["success_rate"] for name, row in rows.items()}
    result = {"machine": machine(), "config": {k: str(v) for k, v in vars(args).items() if k != "json"},
              "relative_update": relative, "success": success}
    if args.json:
        print(json.dumps(result))
        return
    print(f"machine: {result['machine']}")
    print(f"|final - start| / |start| = {relative:.4f}; {args.judge} judge, {args.n} targets of {args.targets}, seed {args.seed}")
    print("| checkpoint | success | minus start |")
    print("|---|---|---|")
    base = success[str(args.start)]
    for name, value in success.items():
        print(f"| {name} | {value:.3f} | {value - base:+.3f} |")


if __name__ == "__main__":
    main()
