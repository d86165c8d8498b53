"""Similarity scoring of (target, guess) pairs: batched with the target cache vs one pair at a time.

    python bench/reward.py                 # 1,000 pairs, a table
    python bench/reward.py --json
    python bench/reward.py --pairs 100     # smoke run

Pairs are built as in GRPO: `targets` distinct messages from the `generated` prompt source,
each paired with a distinct guess drawn from other messages (a retrieval judge guesses a message
of its pool), so a target recurs pairs / targets times and no guess repeats. Three ways, each on MiniLM
(emojikit.play.embedding) with an emptied cache:
  one_at_a_time   one encode call per pair, nothing cached (the original design)
  batched_cold    SimilarityReward.similarity over all pairs in one call, empty cache
  batched_warm    the same call with the targets already cached (a run embeds a target once)
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, parser as bench_parser, print_header  # noqa: E402


def run(args) -> dict:
    import torch

    from emojikit.play.embedding import get_minilm
    from emojikit_retrieval.reward import SimilarityReward
    from emojikit_text.generated import GeneratedConfig, GeneratedSource

    if args.threads:
        torch.set_num_threads(args.threads)
    texts = [m.text for m in GeneratedSource(GeneratedConfig(), seed=args.seed).messages(args.targets + args.pairs)]
    rng = random.Random(args.seed)
    target_pool, guess_pool = texts[: args.targets], texts[args.targets :]
    targets = [target_pool[i % args.targets] for i in range(args.pairs)]
    guesses = rng.sample(guess_pool, len(guess_pool))  # every guess distinct: no help from the cache

    minilm = get_minilm()
    reward = SimilarityReward(minilm=minilm)
    minilm.encode(["warm-up"], cache=False)

    def timed(fn):
        minilm._cache.clear()
        started = time.perf_counter()
        values = fn()
        return time.perf_counter() - started, np.asarray(values, dtype=np.float64)

    def one_at_a_time():
        out = []
        for t, g in zip(targets, guesses):
            emb = minilm.encode([t, g], cache=False)
            out.append(float(emb[0] @ emb[1]))
        return out

    single_s, single = timed(one_at_a_time)
    cold_s, cold = timed(lambda: reward.similarity(targets, guesses))

    minilm._cache.clear()
    minilm.encode(target_pool)  # what a run has done by the time it scores: targets embedded once
    started = time.perf_counter()
    warm = np.asarray(reward.similarity(targets, guesses))
    warm_s = time.perf_counter() - started

    worst = float(max(np.abs(single - cold).max(), np.abs(single - warm).max()))
    return {
        "config": {"pairs": args.pairs, "distinct_targets": args.targets, "threads": torch.get_num_threads()},
        "machine": machine(),
        "one_at_a_time": {"seconds": round(single_s, 3), "pairs_per_s": round(args.pairs / single_s, 1)},
        "batched_cold": {"seconds": round(cold_s, 3), "pairs_per_s": round(args.pairs / cold_s, 1)},
        "batched_warm": {"seconds": round(warm_s, 3), "pairs_per_s": round(args.pairs / warm_s, 1)},
        "speedup_cold": round(single_s / cold_s, 1),
        "speedup_warm": round(single_s / warm_s, 1),
        "max_abs_difference": worst,
    }


def main(argv=None) -> None:
    parser = bench_parser(__doc__, threads=1)
    parser.add_argument("--pairs", type=int, default=1000)
    parser.add_argument("--targets", type=int, default=100, help="distinct targets among the pairs")
    args = parser.parse_args(argv)
    result = run(args)
    if print_header(result, args.json):
        return
    print(f"{'':16}{'seconds':>10}{'pairs/s':>10}")
    for key in ("one_at_a_time", "batched_cold", "batched_warm"):
        print(f"{key:16}{result[key]['seconds']:>10}{result[key]['pairs_per_s']:>10}")
    print(f"batched / one at a time: {result['speedup_cold']}x (cold cache), {result['speedup_warm']}x (targets cached); max |difference| {result['max_abs_difference']:.2e}")


if __name__ == "__main__":
    main()
