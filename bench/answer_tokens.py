"""Seconds of a later pass's SFT step (the main job's until 2026-11-30: ten adapted layers from the kept output of
the twenty below) with the answers scored over the whole vocabulary and over the tokens the
training answers are spelled with (`[sft] answer_tokens_only`), alternated in one process.

    python bench/answer_tokens.py                 # 24 batches each, the SFT training file's
    python bench/answer_tokens.py --steps 2 --limit 256   # smoke run

Two fresh LoRAs (same seed, `--lora-layers` layers, `keep_lower_layers_mb` as recipes/sft.toml)
train on the same length-grouped batches of the SFT training file (`emojikit run
recipes/data.toml` makes it). Each batch trains twice per side, as a first and a later pass do:
the first time runs every layer and keeps the lower layers' output, the second replays it. The
sides alternate, the order swapped every batch, so machine noise falls on both alike.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, parser as bench_parser, print_header, require_data  # noqa: E402

SIDES = ("whole vocabulary", "answer tokens")


def run(args) -> dict:
    import torch

    from emojikit.api.policy import AdamParams
    from emojikit.support.bundled import SMOLLM2
    from emojikit.training.sft import AnswerTokens, chat_datum, length_grouped_batch_indices, load_chats
    from emojikit_local.config import LocalConfig
    from emojikit.support.models import load_model_and_tokenizer
    from emojikit_local.policy import LocalPolicy

    if args.threads:
        torch.set_num_threads(args.threads)
    require_data(args.train_file)
    chats = load_chats(args.train_file, limit=args.limit)
    policies = {}
    for side in SIDES:
        model, tokenizer = load_model_and_tokenizer(SMOLLM2)
        config = LocalConfig(dtype="auto", micro_batch_size=args.batch, lora_layers=args.lora_layers, keep_lower_layers_mb=1024)
        policies[side] = LocalPolicy(model, tokenizer, config, seed=args.seed)
    vocabulary = AnswerTokens.of(policies[SIDES[1]], chats)
    lengths = [len(chat_datum(policies[SIDES[0]], chat).model_input) for chat in chats]
    seconds = {side: {"first": [], "later": []} for side in SIDES}
    for step in range(args.steps + 1):  # step 0 warms both up and is not counted
        batch = length_grouped_batch_indices(lengths, args.batch, step, args.seed, args.group)
        for side in SIDES if step % 2 else reversed(SIDES):
            policy, narrow = policies[side], side == SIDES[1]
            for visit in ("first", "later"):
                datums = [chat_datum(policy, chats[i], vocabulary if narrow else None) for i in batch]
                started = time.perf_counter()
                policy.forward_backward(datums, "cross_entropy", decoder=vocabulary if narrow else None)
                policy.optim_step(AdamParams(learning_rate=args.learning_rate))
                if step:
                    seconds[side][visit].append(time.perf_counter() - started)
    return {
        "machine": machine(),
        "config": {"threads": args.threads, "batch": args.batch, "steps": args.steps, "group": args.group, "lora_layers": args.lora_layers,
                   "answer_tokens": len(vocabulary.token_ids), "train_file": str(args.train_file),
                   "step": "SFT forward_backward + optim_step, dtype auto, one micro-batch; first: every layer, later: the lower layers replayed"},
        "rows": [{"scored over": side, **{f"{visit}_median_s": round(statistics.median(seconds[side][visit]), 3) for visit in ("first", "later")}} for side in SIDES],
        "later_ratio": round(statistics.median(seconds[SIDES[1]]["later"]) / statistics.median(seconds[SIDES[0]]["later"]), 3),
        "first_ratio": round(statistics.median(seconds[SIDES[1]]["first"]) / statistics.median(seconds[SIDES[0]]["first"]), 3),
    }


def main() -> None:
    parser = bench_parser(__doc__, threads=2)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--group", type=int, default=16, help="batches sorted together ([sft] group_by_length; recipes/sft.toml: 16)")
    parser.add_argument("--lora-layers", type=int, default=10, help="the main job's until 2026-11-30, as this bench's logged figures (recipes/sft.toml now: 20)")
    parser.add_argument("--learning-rate", type=float, default=3e-3)
    parser.add_argument("--limit", type=int, default=4096, help="use the first N training chats only")
    parser.add_argument("--train-file", type=Path, default=Path("runs/data/sft_train.jsonl"))
    args = parser.parse_args()
    result = run(args)
    if print_header(result, args.json):
        return
    print(f"answer tokens: {result['config']['answer_tokens']}")
    print(f"{'scored over':<17} {'first pass s/step':>17} {'later pass s/step':>17}")
    for row in result["rows"]:
        print(f"{row['scored over']:<17} {row['first_median_s']:>17.3f} {row['later_median_s']:>17.3f}")
    print(f"answer tokens / whole vocabulary, medians: first {result['first_ratio']:.3f}, later {result['later_ratio']:.3f}")


if __name__ == "__main__":
    main()
