"""Prepacked frozen weights against plain ones: the local backend's bf16 phases with
`prepack_weights` on and off, two policies in one process, rounds alternated.

    python bench/prepack.py --threads 2 --rounds 6                 # every layer adapted
    python bench/prepack.py --threads 2 --rounds 6 --lora-layers 10

With a plain bf16 weight, oneDNN lays the weight out in its blocked format on every product;
`prepack_weights` does that once per frozen weight (and once per merge of the sampler's weights).
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


def run(args) -> dict:
    import torch

    from emojikit.support.bundled import SMOLLM2
    from emojikit_local.config import LocalConfig
    from emojikit.support.models import load_model_and_tokenizer
    from emojikit_local.policy import LocalPolicy

    if args.threads:
        torch.set_num_threads(args.threads)
    arms, shapes = {}, None
    for name, prepack in (("plain", False), ("prepacked", True)):
        model, tokenizer = load_model_and_tokenizer(SMOLLM2)
        config = LocalConfig(dtype="bfloat16", micro_batch_size=args.micro_batch_size, seed=args.seed, lora_layers=args.lora_layers, prepack_weights=prepack)
        arms[name] = LocalPolicy(model, tokenizer, config, seed=args.seed)
        shapes = Shapes(model.config, config.lora_rank, config.lora_layers)
    peak_before = matmul_peak(torch.bfloat16, peak_shapes(arms["plain"].model.config))
    one_round = argparse.Namespace(**{**vars(args), "rounds": 1})
    seconds: dict[str, dict[str, list[float]]] = {name: {phase: [] for phase in PHASES} for name in arms}
    gflop: dict[str, list[float]] = {phase: [] for phase in PHASES}
    for _ in range(args.rounds):
        for name, policy in arms.items():
            rows = measure(policy, shapes, one_round)
            for phase in PHASES:
                seconds[name][phase].append(rows[phase]["seconds"])
                if name == "plain":
                    gflop[phase].append(rows[phase]["gflop"])
    peak_after = matmul_peak(torch.bfloat16, peak_shapes(arms["plain"].model.config))
    peak = max(*peak_before.values(), *peak_after.values())  # the faster of before and after: load shows as a lower one
    rows = []
    for phase in PHASES:
        plain, packed = (statistics.median(seconds[name][phase]) for name in ("plain", "prepacked"))
        work = statistics.fmean(gflop[phase])
        rows.append({"phase": phase, "gflop": round(work, 1), "plain_seconds": round(plain, 3), "prepacked_seconds": round(packed, 3), "speedup": round(plain / packed, 3),
                     "plain_of_bf16_peak": round(work / plain / peak, 3), "prepacked_of_bf16_peak": round(work / packed / peak, 3)})
    return {"machine": machine(), "config": {"threads": torch.get_num_threads(), "rounds": args.rounds, "lora_layers": args.lora_layers, "sft_batch": args.batch, "prompts": args.prompts,
                                             "completions": args.completions, "new_tokens": args.new_tokens},
            "peak_gflop_per_s": {"bfloat16": round(peak, 1)}, "rows": rows}


def main() -> None:
    parser = bench_parser(__doc__, threads=2)
    parser.add_argument("--rounds", type=int, default=6, help="rounds per arm, alternated (each after its own warm-up round)")
    workload_arguments(parser)
    args = parser.parse_args()
    from emojikit_local.hardware import compute_dtype

    if compute_dtype("auto", "cpu") != "bfloat16":
        sys.exit("bench/prepack.py: this CPU has no bf16 matmul units (cpu_kind AMX or AVX512-BF16); prepacking applies to bf16 compute only")
    result = run(args)
    if print_header(result, args.json):
        return
    print(f"bf16 matmul peak: {result['peak_gflop_per_s']['bfloat16']} GFLOP/s")
    print(f"{'phase':<10} {'GFLOP':>7} {'plain s':>8} {'prepacked s':>12} {'speed-up':>9} {'plain':>7} {'prepacked':>10}   (of the bf16 peak)")
    for row in result["rows"]:
        print(f"{row['phase']:<10} {row['gflop']:>7.1f} {row['plain_seconds']:>8.3f} {row['prepacked_seconds']:>12.3f} {row['speedup']:>8.2f}x {row['plain_of_bf16_peak']:>7.0%} {row['prepacked_of_bf16_peak']:>10.0%}")


if __name__ == "__main__":
    main()
