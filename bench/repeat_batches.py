"""Seconds per SFT step on a later pass over the same batches, with the frozen layers' output kept
from the first pass against run again.

    python bench/repeat_batches.py                 # 8 batches of 16, two passes, a table
    python bench/repeat_batches.py --batches 2 --passes 2 --json   # smoke run

recipes/sft.toml trains LoRA in the last 10 of SmolLM2's 30 layers (`lora_layers`), so the 20
below hold no trained weight and compute the same output for a batch on every pass. With
`[sft] repeat_batches` every later pass trains the first pass's batches again, and the local
backend's `keep_lower_layers_mb` keeps that output from the first pass, so a repeated batch's step
runs only the top layers. The peer is the same backend with nothing kept (every step runs every
layer). Both sides train their own LoRA from the same initial weights on the same length-grouped
batches of the SFT training file, one step each in turn, so machine noise falls on both alike; the
first pass is the same on both sides (the keeping side records as it goes) and later passes show
the difference. The bench checks that both sides computed the same losses.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, parser as bench_parser, peak_rss_mb, print_header, require_data  # noqa: E402

SIDES = ("kept", "run again")


def run(args) -> dict:
    import torch

    from emojikit.api.policy import AdamParams
    from emojikit.support.bundled import SMOLLM2
    from emojikit.training.sft import chat_datum, length_grouped_batch_indices, load_chats
    from emojikit_local.config import LocalConfig
    from emojikit.support.models import load_model_and_tokenizer
    from emojikit_local.policy import LocalPolicy

    if args.threads:
        torch.set_num_threads(args.threads)
    require_data(args.train_file)
    chats = load_chats(args.train_file, limit=args.batch * args.batches)
    policies = {}
    for side in SIDES:
        model, tokenizer = load_model_and_tokenizer(SMOLLM2)
        config = LocalConfig(dtype="auto", micro_batch_size=args.batch, lora_layers=args.lora_layers, keep_lower_layers_mb=1024 if side == "kept" else 0)
        policies[side] = LocalPolicy(model, tokenizer, config, seed=args.seed)
    probe = policies[SIDES[0]]
    lengths = [len(chat_datum(probe, chat).model_input) for chat in chats]
    batches = [[chats[i] for i in length_grouped_batch_indices(lengths, args.batch, step, args.seed, args.batches)] for step in range(args.batches)]

    seconds = {side: [[] for _ in range(args.passes)] for side in SIDES}
    losses = {side: [] for side in SIDES}
    for repeat in range(args.passes):
        for batch in batches:
            for side, policy in policies.items():
                datums = [chat_datum(policy, chat) for chat in batch]
                started = time.perf_counter()
                out = policy.forward_backward(datums, "cross_entropy")
                policy.optim_step(AdamParams(learning_rate=1e-3))
                seconds[side][repeat].append(time.perf_counter() - started)
                losses[side].append(out.loss)
    later = {side: statistics.median(s for per_pass in seconds[side][1:] for s in per_pass) for side in SIDES}
    first = {side: statistics.median(seconds[side][0][1:] or seconds[side][0]) for side in SIDES}  # the first step warms up
    worst = max(abs(a - b) for a, b in zip(losses["kept"], losses["run again"]))
    return {
        "machine": machine(),
        "config": {"batch": args.batch, "batches": args.batches, "passes": args.passes, "lora_layers": args.lora_layers, "threads": torch.get_num_threads(), "train_file": str(args.train_file)},
        "rows": [{"side": side, "first_pass_s": round(first[side], 3), "later_pass_s": round(later[side], 3), "replayed_batches": policies[side].lower_layers.hits} for side in SIDES],
        "later_pass_speedup": round(later["run again"] / later["kept"], 2),
        "kept_mb": round(policies["kept"].lower_layers.kept_bytes / 2**20, 1),
        "largest_loss_difference": worst,
        "peak_rss_mb": round(peak_rss_mb()),
    }


def main() -> None:
    parser = bench_parser(__doc__, threads=0)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--batches", type=int, default=8, help="batches a pass (one length-grouped window)")
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--lora-layers", type=int, default=10)
    parser.add_argument("--train-file", type=Path, default=Path("runs/data/sft_train.jsonl"))
    args = parser.parse_args()
    if args.passes < 2:
        parser.error("--passes: at least 2 (the first pass is the same on both sides)")
    result = run(args)
    if print_header(result, args.json):
        return
    print(f"{'side':<10} {'first pass s/step':>18} {'later passes s/step':>20} {'replayed batches':>17}")
    for row in result["rows"]:
        print(f"{row['side']:<10} {row['first_pass_s']:>18.3f} {row['later_pass_s']:>20.3f} {row['replayed_batches']:>17}")
    print(f"later passes: {result['later_pass_speedup']:.2f}x faster with the lower layers kept ({result['kept_mb']} MB kept); "
          f"largest loss difference {result['largest_loss_difference']:.2e}; peak RSS {result['peak_rss_mb']} MB")


if __name__ == "__main__":
    main()
