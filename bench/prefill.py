"""The held-out game with the prompts' common start prefilled once against every prompt prefilled whole.

    python bench/prefill.py --checkpoint runs/sft          # the first 128 everyday messages, 2 turns
    python bench/prefill.py --targets 8 --rounds 1         # smoke run

Every prompt of a game starts with the same chat template and system prompt (19 tokens of a first
turn's ~30 on SmolLM2). The local sampler runs that start once, batch 1, and copies its KV cache to
every row (`sampling.prefill`); the peer runs every prompt whole (the same code with the sharing
threshold out of reach). Both play the same game as `emojikit eval` does (recipes/eval.toml's
sender temperature and seed, the emoji mask, the `keywords` judge, 2 turns) in this process,
alternating sides round by round; the bench prints the seconds of each game, the sampling seconds
inside it, and whether both sides drew the same emoji.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, parser as bench_parser, print_header  # noqa: E402
from rollouts import build  # noqa: E402


def run(args) -> dict:
    import torch

    from emojikit.api.policy import SamplingParams
    from emojikit.play.game import GameSettings, play
    from emojikit.play.targets import read_targets
    from emojikit_local import sampling as local_sampling

    if args.threads:
        torch.set_num_threads(args.threads)
    policy = build("backend", "local", args.seed)
    if args.checkpoint != "base":
        policy.load(args.checkpoint, with_optimizer=False)
    decoder, judge, reward = build("decoder", "emoji-mask", args.seed), build("judge", "keywords", args.seed), build("reward", "similarity", args.seed)
    rows = read_targets(Path(args.targets_file))
    targets = rows[: args.targets]
    judge.add_candidates([m.text for m in rows])
    settings = GameSettings(max_turns=2)
    params = SamplingParams(temperature=0.3, seed=1)
    sample = policy.sample
    sampled: list[float] = []

    def timed_sample(*a, **k):
        began = time.perf_counter()
        try:
            return sample(*a, **k)
        finally:
            sampled.append(time.perf_counter() - began)

    policy.sample = timed_sample
    play(policy, decoder, judge, reward, targets[:2], settings=settings, sampling=params)  # warm-up: decoder tables, MiniLM
    shared_min = local_sampling.MIN_COMMON_PREFIX
    sides = {"shared start": shared_min, "whole prompts": 10**9}
    seconds = {side: [] for side in sides}
    sampling_seconds = {side: [] for side in sides}
    emoji = {}
    for _ in range(args.rounds):
        for side, threshold in sides.items():
            local_sampling.MIN_COMMON_PREFIX = threshold
            sampled.clear()
            began = time.perf_counter()
            episodes = play(policy, decoder, judge, reward, targets, settings=settings, sampling=params)
            seconds[side].append(time.perf_counter() - began)
            sampling_seconds[side].append(sum(sampled))
            emoji[side] = [[t.emoji for t in ep.turns] for ep in episodes]
    local_sampling.MIN_COMMON_PREFIX = shared_min
    median = {side: statistics.median(v) for side, v in seconds.items()}
    return {
        "config": {"checkpoint": args.checkpoint, "targets": len(targets), "turns": 2, "rounds": args.rounds, "threads": torch.get_num_threads()},
        "machine": machine(),
        **{side: {"game_seconds": round(median[side], 2), "sampling_seconds": round(statistics.median(sampling_seconds[side]), 2),
                  "all_game_seconds": [round(s, 2) for s in seconds[side]]} for side in sides},
        "ratio": round(median["shared start"] / median["whole prompts"], 3),
        "same_emoji": emoji["shared start"] == emoji["whole prompts"],
    }


def main(argv=None) -> None:
    parser = bench_parser(__doc__, threads=0)
    parser.add_argument("--checkpoint", default="base", help="the sender: a checkpoint directory or base")
    parser.add_argument("--targets-file", default="recipes/targets/real-texts.jsonl")
    parser.add_argument("--targets", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    result = run(args)
    if print_header(result, args.json):
        return
    print("| prefill | game seconds (median) | sampling seconds inside it | every round |")
    print("|---|---|---|---|")
    for side in ("shared start", "whole prompts"):
        print(f"| {side} | {result[side]['game_seconds']} | {result[side]['sampling_seconds']} | {result[side]['all_game_seconds']} |")
    print(f"ratio {result['ratio']} (shared / whole); both sides drew the same emoji: {result['same_emoji']}")


if __name__ == "__main__":
    main()
