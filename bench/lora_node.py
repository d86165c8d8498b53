"""Seconds per float32 SFT step with each LoRA projection as one autograd node
(`precision.float32_compute`, what the local backend runs in float32) against peft's own
lora.Linear forward (five nodes a projection), alternated in one process.

    python bench/lora_node.py                          # 10 and 30 adapted layers, 12 rounds, a table
    python bench/lora_node.py --lora-layers 30 --rounds 2 --batches 2   # smoke run

Both sides are the local backend in float32 (`dtype = "float32"`, whatever the CPU) with the main
job's SFT settings (micro-batch 16), each training its own LoRA from the same initial weights on
the same length-grouped batches of the SFT training file (recipes/sft.toml's order), one step of
each side in turn, so machine noise falls on both alike. The peer differs only in its LoRA
projections' forward (peft's again); the bench checks the two sides' losses agree.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, parser as bench_parser, peak_rss_mb, print_header, require_data  # noqa: E402

SIDES = ("one node", "peft")


def run(args) -> dict:
    import torch
    from peft.tuners.lora import Linear as LoraLinear

    from emojikit.api.policy import AdamParams
    from emojikit.support.bundled import SMOLLM2
    from emojikit.training.sft import chat_datum, length_grouped_batch_indices, load_chats
    from emojikit_local.config import LocalConfig
    from emojikit_local.loading import load_model_and_tokenizer
    from emojikit_local.policy import LocalPolicy

    if args.threads:
        torch.set_num_threads(args.threads)
    require_data(args.train_file)
    chats = load_chats(args.train_file, limit=16 * 16)  # one window of 16 batches, sorted by length
    rows = []
    for layers in args.lora_layers:
        policies = {}
        for side in SIDES:
            model, tokenizer = load_model_and_tokenizer(SMOLLM2)
            config = LocalConfig(dtype="float32", micro_batch_size=16, lora_layers=None if layers == 30 else layers)
            policies[side] = LocalPolicy(model, tokenizer, config, seed=args.seed)
        for module in policies["peft"].model.modules():
            if isinstance(module, LoraLinear):
                del module.forward  # peft's lora.Linear.forward
        lengths = [len(chat_datum(policies["peft"], chat).model_input) for chat in chats]
        batches = [[chats[i] for i in length_grouped_batch_indices(lengths, 16, step, args.seed, 16)] for step in range(args.batches)]
        seconds = {side: [] for side in SIDES}
        losses = {side: [] for side in SIDES}
        for round_ in range(args.rounds + 1):  # round 0 warms both sides up
            for batch in batches:
                for side, policy in policies.items():
                    datums = [chat_datum(policy, chat) for chat in batch]
                    started = time.perf_counter()
                    out = policy.forward_backward(datums, "cross_entropy")
                    policy.optim_step(AdamParams(learning_rate=3e-3))
                    if round_:
                        seconds[side].append(time.perf_counter() - started)
                        losses[side].append(out.loss)
        gap = max(abs(a - b) for a, b in zip(losses["one node"], losses["peft"]))
        base = statistics.median(seconds["peft"])
        for side in SIDES:
            median = statistics.median(seconds[side])
            rows.append({"lora_layers": layers, "side": side, "seconds_per_step": round(median, 3),
                         "speedup": round(base / median, 2), "loss_gap": gap})
        del policies
    return {
        "machine": machine(),
        "config": {"rounds": args.rounds, "batches": args.batches, "threads": torch.get_num_threads(), "train_file": str(args.train_file)},
        "rows": rows,
        "peak_rss_mb": round(peak_rss_mb()),
    }


def main() -> None:
    parser = bench_parser(__doc__, threads=0)
    parser.add_argument("--lora-layers", type=int, nargs="+", default=[10, 30], help="adapted layers (the last N of 30)")
    parser.add_argument("--rounds", type=int, default=6, help="passes over the batches (after one of warm-up)")
    parser.add_argument("--batches", type=int, default=2, help="length-grouped batches of 16 a round")
    parser.add_argument("--train-file", type=Path, default=Path("runs/data/sft_train.jsonl"))
    args = parser.parse_args()
    result = run(args)
    if print_header(result, args.json):
        return
    print(f"{'adapted layers':<15} {'side':<10} {'s/step':>8} {'speedup':>8} {'largest loss gap':>17}")
    for row in result["rows"]:
        print(f"{row['lora_layers']:<15} {row['side']:<10} {row['seconds_per_step']:>8.3f} {row['speedup']:>7.2f}x {row['loss_gap']:>17.2e}")
    print(f"peak RSS: {result['peak_rss_mb']} MB")


if __name__ == "__main__":
    main()
