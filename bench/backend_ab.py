"""One bf16 setting of the local backend on and off: its phases with the setting false and true,
two policies in one process, rounds alternated.

    python bench/backend_ab.py --setting fuse_projections --threads 2 --rounds 6
    python bench/backend_ab.py --setting prepack_weights --threads 2 --rounds 6 --lora-layers 10

The settings (plugins/emojikit_local/config.py; each on by default):
  prepack_weights    frozen bf16 weights laid out once in oneDNN's blocked format, instead of by
                     oneDNN on every product (and once per merge of the sampler's weights)
  fuse_projections   q/k/v and gate/up as one product of their stacked weights (siblings.py)
The phases are bench/flops.py's (SFT step, sampling, the KL's reference pass, the GRPO training
pass), each timed once per round per arm after a warm-up; the table gives each arm's median, the
ratio, and the share of the bf16 matmul peak (measured in the same run). bf16 compute only: the
CPU needs bf16 matmul units (`cpu_kind` AMX or AVX512-BF16), elsewhere the bf16 step is emulated.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, parser as bench_parser, print_header  # noqa: E402
from flops import PHASES, Shapes, matmul_peak, measure, peak_shapes, workload_arguments  # noqa: E402

SETTINGS = ("prepack_weights", "fuse_projections")


def run(args) -> dict:
    import torch

    from emojikit.support.bundled import SMOLLM2
    from emojikit_local.config import LocalConfig
    from emojikit_local.loading import load_model_and_tokenizer
    from emojikit_local.policy import LocalPolicy

    if args.threads:
        torch.set_num_threads(args.threads)
    arms, shapes = {}, None
    for name, on in (("off", False), ("on", True)):
        model, tokenizer = load_model_and_tokenizer(SMOLLM2)
        config = LocalConfig(dtype="bfloat16", micro_batch_size=args.micro_batch_size, seed=args.seed, lora_layers=args.lora_layers, **{args.setting: on})
        arms[name] = LocalPolicy(model, tokenizer, config, seed=args.seed)
        shapes = Shapes(model.config, config.lora_rank, config.lora_layers)
    peak_before = matmul_peak(torch.bfloat16, peak_shapes(arms["off"].model.config))
    one_round = argparse.Namespace(**{**vars(args), "rounds": 1})
    seconds: dict[str, dict[str, list[float]]] = {name: {phase: [] for phase in PHASES} for name in arms}
    gflop: dict[str, list[float]] = {phase: [] for phase in PHASES}
    for _ in range(args.rounds):
        for name, policy in arms.items():
            rows = measure(policy, shapes, one_round)
            for phase in PHASES:
                seconds[name][phase].append(rows[phase]["seconds"])
                if name == "off":
                    gflop[phase].append(rows[phase]["gflop"])
    peak_after = matmul_peak(torch.bfloat16, peak_shapes(arms["off"].model.config))
    peak = max(*peak_before.values(), *peak_after.values())  # the faster of before and after: load shows as a lower one
    rows = []
    for phase in PHASES:
        off, on = (statistics.median(seconds[name][phase]) for name in ("off", "on"))
        work = statistics.fmean(gflop[phase])
        rows.append({"phase": phase, "gflop": round(work, 1), "off_seconds": round(off, 3), "on_seconds": round(on, 3), "speedup": round(off / on, 3),
                     "off_of_bf16_peak": round(work / off / peak, 3), "on_of_bf16_peak": round(work / on / peak, 3)})
    return {"machine": machine(), "config": {"setting": args.setting, "threads": torch.get_num_threads(), "rounds": args.rounds, "lora_layers": args.lora_layers, "sft_batch": args.batch, "prompts": args.prompts,
                                             "completions": args.completions, "new_tokens": args.new_tokens},
            "peak_gflop_per_s": {"bfloat16": round(peak, 1)}, "rows": rows}


def main() -> None:
    parser = bench_parser(__doc__, threads=2)
    parser.add_argument("--setting", required=True, choices=SETTINGS, help="the backend setting to time off and on")
    parser.add_argument("--rounds", type=int, default=6, help="rounds per arm, alternated (each after its own warm-up round)")
    workload_arguments(parser)
    args = parser.parse_args()
    from emojikit_local.hardware import compute_dtype

    if compute_dtype("auto", "cpu") != "bfloat16":
        sys.exit(f"bench/backend_ab.py: this CPU has no bf16 matmul units (cpu_kind AMX or AVX512-BF16); {args.setting} applies to bf16 compute only")
    result = run(args)
    if print_header(result, args.json):
        return
    print(f"{args.setting} off and on; bf16 matmul peak: {result['peak_gflop_per_s']['bfloat16']} GFLOP/s")
    print(f"{'phase':<10} {'GFLOP':>7} {'off s':>8} {'on s':>8} {'speed-up':>9} {'off':>6} {'on':>6}   (of the bf16 peak)")
    for row in result["rows"]:
        print(f"{row['phase']:<10} {row['gflop']:>7.1f} {row['off_seconds']:>8.3f} {row['on_seconds']:>8.3f} {row['speedup']:>8.2f}x {row['off_of_bf16_peak']:>6.0%} {row['on_of_bf16_peak']:>6.0%}")


if __name__ == "__main__":
    main()
