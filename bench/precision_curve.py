"""SFT loss curves of the local backend's float32 and bfloat16 paths, trained side by side on
the same batches, and their held-out loss: is bf16 within seed noise of fp32?

    python bench/precision_curve.py --train-file runs/data/sft_train.jsonl --test-file runs/data/sft_test.jsonl
    python bench/precision_curve.py ... --settings float32:0 float32:1 bfloat16:0   # seed noise beside it
    python bench/precision_curve.py ... --steps 3 --batch 4 --test 8             # smoke run

Each setting (dtype:seed) trains its own LoRA (the recipe's rank 16, lr 3e-3 with 10 warm-up
steps and a cosine decay, batch 16) on the batches of its seed; steps are interleaved, so load
on the machine falls on all settings alike. One JSON line per step and setting (train loss,
CPU seconds), then the held-out loss (mean NLL per answer token, each policy in its own dtype).
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, parser as bench_parser  # noqa: E402


def learning_rate(step: int, steps: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * 0.5 * (1 + math.cos(math.pi * progress))


def main() -> None:
    parser = bench_parser(__doc__, threads=1)
    parser.add_argument("--train-file", type=Path, required=True)
    parser.add_argument("--test-file", type=Path, required=True)
    parser.add_argument("--settings", nargs="+", default=["float32:0", "bfloat16:0"], help="dtype:seed")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--test", type=int, default=128, help="held-out chats scored at the end")
    parser.add_argument("--learning-rate", type=float, default=3e-3)
    args = parser.parse_args()

    import torch

    from emojikit.support.bundled import SMOLLM2
    from emojikit.api.policy import AdamParams
    from emojikit.training.sft import batch_indices, chat_datum, load_chats
    from emojikit_local.config import LocalConfig
    from emojikit.support.models import load_model_and_tokenizer
    from emojikit_local.policy import LocalPolicy

    torch.set_num_threads(args.threads or 1)
    chats, test = load_chats(args.train_file), load_chats(args.test_file, limit=args.test)
    runs = []
    for setting in args.settings:
        dtype, seed = setting.split(":")
        model, tokenizer = load_model_and_tokenizer(SMOLLM2)
        runs.append((setting, int(seed), LocalPolicy(model, tokenizer, LocalConfig(dtype=dtype, micro_batch_size=16, seed=int(seed)), seed=int(seed))))
    print(json.dumps({"machine": machine(), "settings": args.settings, "steps": args.steps, "batch": args.batch}), flush=True)
    for step in range(args.steps):
        lr = learning_rate(step, args.steps, args.learning_rate, 10)
        for setting, seed, policy in runs:
            datums = [chat_datum(policy, chats[i]) for i in batch_indices(len(chats), args.batch, step, seed)]
            started = time.process_time()
            out = policy.forward_backward(datums, "cross_entropy")
            policy.optim_step(AdamParams(learning_rate=lr))
            print(json.dumps({"setting": setting, "step": step, "loss": round(out.loss, 5), "cpu_s": round(time.process_time() - started, 3)}), flush=True)
    for setting, _, policy in runs:
        datums = [chat_datum(policy, chat) for chat in test]
        logprobs = policy.compute_logprobs(datums)
        nll = -sum(lp for d, row in zip(datums, logprobs) for lp, w in zip(row, d.weights) if w)
        tokens = sum(1 for d in datums for w in d.weights if w)
        print(json.dumps({"setting": setting, "heldout_nll_per_token": round(nll / tokens, 5), "heldout_chats": len(datums)}), flush=True)


if __name__ == "__main__":
    main()
