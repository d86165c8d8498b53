"""Seconds per SFT step of the main job's batches with the local backend's two ways of sharing a
step among two threads: each thread its own rows of the batch (`[backend] parallel = "rows"`)
or every product split across the threads (`"ops"`), alternated in one process on an idle machine.

    python bench/row_parallel.py                 # 60 steps each, recipes/sft.toml's batches
    python bench/row_parallel.py --steps 4 --limit 256   # smoke run

Two fresh LoRAs (same seed, the last `--lora-layers` layers, as recipes/sft.toml) train on the
same length-grouped batches of the SFT training file (`emojikit run recipes/data.toml` makes
it); a step of each runs in turn, the order swapped every step, so machine noise falls on both
alike. `bench/under_load.py --parallel rows ops` times the same choice beside competing processes.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, parser as bench_parser, print_header, require_data  # noqa: E402

SIDES = ("rows", "ops")


def run(args) -> dict:
    import torch

    from emojikit.api.policy import AdamParams
    from emojikit.support.bundled import SMOLLM2
    from emojikit.training.sft import chat_datum, length_grouped_batch_indices, load_chats
    from emojikit_local.config import LocalConfig
    from emojikit.support.models import load_model_and_tokenizer
    from emojikit_local.policy import LocalPolicy

    torch.set_num_threads(args.threads)
    require_data(args.train_file)
    chats = load_chats(args.train_file, limit=args.limit)
    policies = {}
    for side in SIDES:
        model, tokenizer = load_model_and_tokenizer(SMOLLM2)
        config = LocalConfig(dtype="auto", micro_batch_size=args.batch, lora_layers=args.lora_layers, parallel=side)
        policies[side] = LocalPolicy(model, tokenizer, config, seed=args.seed)
    if policies["rows"].row_workers is None:
        raise SystemExit("row_parallel: rows need two or more torch threads (--threads)")
    lengths = [len(chat_datum(policies["ops"], chat).model_input) for chat in chats]
    seconds: dict[str, list[float]] = {side: [] for side in SIDES}
    losses: dict[str, list[float]] = {side: [] for side in SIDES}
    for step in range(args.steps + 1):  # step 0 warms both up and is not counted
        batch = length_grouped_batch_indices(lengths, args.batch, step, args.seed, args.group)
        for side in SIDES if step % 2 else reversed(SIDES):
            policy = policies[side]
            datums = [chat_datum(policy, chats[i]) for i in batch]
            started = time.perf_counter()
            out = policy.forward_backward(datums, "cross_entropy")
            policy.optim_step(AdamParams(learning_rate=args.learning_rate))
            if step:
                seconds[side].append(time.perf_counter() - started)
                losses[side].append(out.loss)
    ratios = [r / o for r, o in zip(seconds["rows"], seconds["ops"])]
    return {
        "machine": machine(),
        "config": {"threads": args.threads, "batch": args.batch, "steps": args.steps, "group": args.group, "lora_layers": args.lora_layers,
                   "train_file": str(args.train_file), "step": "SFT forward_backward + optim_step, dtype auto, one micro-batch, length-grouped batches"},
        "rows": [{"parallel": side, "median_s": round(statistics.median(seconds[side]), 3), "total_s": round(sum(seconds[side]), 1),
                  "last_loss": round(losses[side][-1], 4)} for side in SIDES],
        "rows_over_ops_median": round(statistics.median(ratios), 3),
    }


def main() -> None:
    parser = bench_parser(__doc__, threads=2)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--group", type=int, default=16, help="batches sorted together ([sft] group_by_length; recipes/sft.toml: 16)")
    parser.add_argument("--lora-layers", type=int, default=10, help="the main job's until 2026-11-30, as this bench's logged figures (recipes/sft.toml now: 20)")
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--limit", type=int, default=4096, help="use the first N training chats only")
    parser.add_argument("--train-file", type=Path, default=Path("runs/data/sft_train.jsonl"))
    args = parser.parse_args()
    result = run(args)
    if print_header(result, args.json):
        return
    print(f"{'parallel':<9} {'median s/step':>13} {'total s':>8} {'last loss':>9}")
    for row in result["rows"]:
        print(f"{row['parallel']:<9} {row['median_s']:>13.3f} {row['total_s']:>8.1f} {row['last_loss']:>9.4f}")
    print(f"rows / ops, median over steps: {result['rows_over_ops_median']:.3f}")


if __name__ == "__main__":
    main()
