"""Seconds per SFT step with random batches, one chat a row (`[backend] pack_rows = false`) and
packed several to a row (the default), against length-grouped ones (`[sft] group_by_length`), on
the bundled SmolLM2 with the main job's backend settings, alternated in one process.

    python bench/length_groups.py                    # 64 steps each, groups of 16 batches (recipes/sft.toml's)
    python bench/length_groups.py --steps 8 --group 4 --limit 512   # smoke run

Fresh LoRAs (same seed) train on the same stretch of the SFT training file (`emojikit run
recipes/data.toml` makes it): one takes its batches as `batch_indices` draws them (the first two), the
last as `length_grouped_batch_indices` regroups the same examples (with --steps a multiple of --group,
all see exactly the same examples). A step of each runs in turn, so machine noise falls on all
alike. Padded share: the pad tokens a batch adds after the prefix its rows share (the backend runs
that prefix once), over all the tokens it runs (packed: over its packed rows).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, parser as bench_parser, print_header, require_data  # noqa: E402


def padded_share(datums, packed: bool) -> float:
    from emojikit_local.scoring import packing

    rows = [d.model_input for d in datums]
    shared = 0
    while all(len(r) > shared + 1 and r[shared] == rows[0][shared] for r in rows):
        shared += 1
    lengths = [len(r) - shared for r in rows]
    packed_rows, width = packing(lengths, [0] * len(rows)) if packed else (rows, max(lengths))
    return 1 - sum(lengths) / (len(packed_rows) * width)


def run(args) -> dict:
    import torch

    from emojikit.api.policy import AdamParams
    from emojikit.support.bundled import SMOLLM2
    from emojikit.training.sft import batch_indices, chat_datum, length_grouped_batch_indices, load_chats
    from emojikit_local.config import LocalConfig
    from emojikit.support.models import load_model_and_tokenizer
    from emojikit_local.policy import LocalPolicy

    if args.threads:
        torch.set_num_threads(args.threads)
    require_data(args.train_file)
    chats = load_chats(args.train_file, limit=args.limit)
    policies, packs = {}, {}
    for name, pack in (("random, one a row", False), ("random, packed", True), (f"grouped by length ({args.group})", True)):
        model, tokenizer = load_model_and_tokenizer(SMOLLM2)  # float32 weights, as the plugin loads them
        config = LocalConfig(dtype="auto", lora_layers=args.lora_layers, micro_batch_size=args.batch, pack_rows=pack)
        policies[name], packs[name] = LocalPolicy(model, tokenizer, config, seed=args.seed), pack
    any_policy = next(iter(policies.values()))
    started = time.perf_counter()
    lengths = [len(chat_datum(any_policy, chat).model_input) for chat in chats]
    length_seconds = time.perf_counter() - started

    def batch(name: str, step: int) -> list[int]:
        if name.startswith("random"):
            return batch_indices(len(chats), args.batch, step, args.seed)
        return length_grouped_batch_indices(lengths, args.batch, step, args.seed, args.group)

    seconds = {name: [] for name in policies}
    losses = {name: [] for name in policies}
    padding = {name: [] for name in policies}
    for step in range(args.steps + 1):  # step 0 warms both up and is not counted
        for name, policy in policies.items():
            datums = [chat_datum(policy, chats[i]) for i in batch(name, step)]
            t0 = time.perf_counter()
            out = policy.forward_backward(datums, "cross_entropy")
            policy.optim_step(AdamParams(learning_rate=1e-3))
            if step:
                seconds[name].append(time.perf_counter() - t0)
                losses[name].append(out.loss)
                padding[name].append(padded_share(datums, packs[name]))
    base = statistics.median(seconds["random, one a row"])
    rows = [{
        "batches": name,
        "seconds_per_step": round(statistics.median(values), 3),
        "total_seconds": round(sum(values), 1),
        "padded_share": round(statistics.mean(padding[name]), 3),
        "mean_loss": round(statistics.mean(losses[name]), 4),
        "speedup": round(base / statistics.median(values), 2),
    } for name, values in seconds.items()]
    return {
        "machine": machine(),
        "config": {"batch": args.batch, "steps": args.steps, "group": args.group, "lora_layers": args.lora_layers, "dtype": "auto",
                   "threads": torch.get_num_threads(), "chats": len(chats), "length_seconds": round(length_seconds, 1)},
        "rows": rows,
    }


def main() -> None:
    parser = bench_parser(__doc__, threads=0)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--group", type=int, default=16, help="batches sorted together ([sft] group_by_length; recipes/sft.toml: 16)")
    parser.add_argument("--lora-layers", type=int, default=10, help="the main job's until 2026-11-30, as this bench's logged figures (recipes/sft.toml now: 20)")
    parser.add_argument("--limit", type=int, default=None, help="use the first N training chats only")
    parser.add_argument("--train-file", type=Path, default=Path("runs/data/sft_train.jsonl"))
    args = parser.parse_args()
    result = run(args)
    if print_header(result, args.json):
        return
    print(f"{'batches':<26} {'s/step':>8} {'total s':>8} {'padded':>7} {'mean loss':>10} {'speedup':>8}")
    for row in result["rows"]:
        print(f"{row['batches']:<26} {row['seconds_per_step']:>8.3f} {row['total_seconds']:>8.1f} {row['padded_share']:>7.1%} {row['mean_loss']:>10.4f} {row['speedup']:>7.2f}x")


if __name__ == "__main__":
    main()
