"""Held-out answer NLL per SFT step and per second: emoji as the tokenizer's byte tokens (today)
against one added token per emoji whose embedding starts as its CLDR name's.

    python bench/emoji_tokens.py                       # both sides, 300 steps each, a table
    python bench/emoji_tokens.py --steps 20 --test 16  # smoke run

SmolLM2's byte-level tokenizer spells an emoji in 2-4 byte tokens (an answer is a median of 10
tokens with its end-of-turn token), whose embeddings say nothing of what the emoji shows. The
`names` side adds every emoji of the SFT data and the inventory to the tokenizer as one token
(SmolLM2 ties its input and output embeddings, so one row serves both) set to the mean embedding
of its CLDR name's tokens (" pizza", " face with tears of joy"), frozen like every base weight:
the LoRA only has to steer the hidden state towards a word the model already knows. Each side
trains the backend's LoRA (last 10 layers, r16) from the same seed on the same random batches of
the SFT training file (lr 3e-3, warmup 10, cosine to zero), and every 100 steps scores the first
`--test` chats of the test file: the NLL of the whole answer and its end-of-turn token, summed
over its tokens, so both spellings are scored on the same string. The sides run one after the
other in this process (never side by side: on two cores they would slow each other).
"""

from __future__ import annotations

import math
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, peak_rss_mb, parser as bench_parser, print_header, require_data  # noqa: E402

SIDES = ("bytes", "names")


def add_emoji_tokens(model, tokenizer, emoji_seqs: list[str]) -> int:
    """One token per emoji, its embedding row the mean of its CLDR name's token embeddings."""
    import torch

    from emojikit.api import emojis

    table = model.get_input_embeddings().weight.detach()
    rows = torch.stack([table[tokenizer.encode(" " + (emojis.name(seq) or seq), add_special_tokens=False)].mean(0) for seq in emoji_seqs])
    before = len(tokenizer)
    tokenizer.add_tokens(emoji_seqs)
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    with torch.no_grad():
        model.get_input_embeddings().weight[tokenizer.convert_tokens_to_ids(emoji_seqs)] = rows
    return len(tokenizer) - before


def train_side(side: str, train_chats, test_chats, args) -> dict:
    from emojikit.api import emojis
    from emojikit.api.policy import AdamParams
    from emojikit.support.bundled import SMOLLM2
    from emojikit.training.sft import chat_datum
    from emojikit_local.config import LocalConfig
    from emojikit.support.models import load_model_and_tokenizer
    from emojikit_local.policy import LocalPolicy

    model, tokenizer = load_model_and_tokenizer(SMOLLM2)
    added = 0
    if side == "names":
        used = {seq for chat in train_chats + test_chats for seq in emojis.split(chat[-1]["content"])}
        added = add_emoji_tokens(model, tokenizer, sorted(set(emojis.inventory()) | used))
        assert model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr(), "the bench assumes tied embeddings"
    policy = LocalPolicy(model, tokenizer, LocalConfig(dtype="float32", micro_batch_size=args.batch, lora_layers=args.lora_layers), seed=args.seed)
    train = [chat_datum(policy, chat) for chat in train_chats]
    test = [chat_datum(policy, chat) for chat in test_chats]

    def test_nll() -> float:
        logprobs = policy.compute_logprobs(test, weighted_only=True)
        return statistics.fmean(-sum(lp for lp, w in zip(row, datum.weights) if w) for row, datum in zip(logprobs, test))

    order = list(range(len(train)))
    random.Random(args.seed).shuffle(order)
    curve = [{"step": 0, "nll": round(test_nll(), 3), "seconds": 0.0}]
    seconds = 0.0
    warm = 10
    for step in range(args.steps):
        rate = args.lr * (step + 1) / warm if step < warm else args.lr * 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, args.steps - warm)))
        batch = [train[order[(step * args.batch + i) % len(order)]] for i in range(args.batch)]
        started = time.perf_counter()
        policy.forward_backward(batch, "cross_entropy")
        policy.optim_step(AdamParams(learning_rate=rate))
        seconds += time.perf_counter() - started
        if (step + 1) % args.every == 0 or step + 1 == args.steps:
            curve.append({"step": step + 1, "nll": round(test_nll(), 3), "seconds": round(seconds, 1)})
            print(f"  {side} step {step + 1}: test NLL {curve[-1]['nll']}, {curve[-1]['seconds']} s of steps", file=sys.stderr, flush=True)
    answer_tokens = statistics.median(sum(1 for w in datum.weights if w) for datum in train)
    return {"side": side, "added_tokens": added, "answer_tokens_median": answer_tokens, "curve": curve}


def run(args) -> dict:
    import torch

    from emojikit.training.sft import load_chats

    if args.threads:
        torch.set_num_threads(args.threads)
    require_data(args.train_file, args.test_file)
    train_chats = load_chats(args.train_file)
    test_chats = load_chats(args.test_file, limit=args.test)
    sides = [train_side(side, train_chats, test_chats, args) for side in SIDES]
    return {
        "machine": machine(),
        "config": {"steps": args.steps, "batch": args.batch, "lr": args.lr, "lora_layers": args.lora_layers, "test_chats": len(test_chats), "threads": torch.get_num_threads(), "train_file": str(args.train_file)},
        "sides": sides,
        "peak_rss_mb": round(peak_rss_mb()),
    }


def main() -> None:
    parser = bench_parser(__doc__, threads=0)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--every", type=int, default=100, help="steps between test NLLs")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--lora-layers", type=int, default=10)
    parser.add_argument("--test", type=int, default=128, help="test chats scored")
    parser.add_argument("--train-file", type=Path, default=Path("runs/data/sft_train.jsonl"))
    parser.add_argument("--test-file", type=Path, default=Path("runs/data/sft_test.jsonl"))
    args = parser.parse_args()
    result = run(args)
    if print_header(result, args.json):
        return
    print(f"{'side':<6} {'added':>6} {'answer tokens':>13}   test NLL of an answer (s of steps) at step ...")
    for side in result["sides"]:
        points = "  ".join(f"{p['step']}: {p['nll']:.2f} ({p['seconds']:.0f} s)" for p in side["curve"])
        print(f"{side['side']:<6} {side['added_tokens']:>6} {side['answer_tokens_median']:>13}   {points}")
    first, second = (side["curve"][-1] for side in result["sides"])
    print(f"last step: names - bytes = {second['nll'] - first['nll']:+.2f} nats an answer, in {second['seconds'] / max(first['seconds'], 1e-9):.2f}x the seconds of steps; peak RSS {result['peak_rss_mb']} MB")


if __name__ == "__main__":
    main()
