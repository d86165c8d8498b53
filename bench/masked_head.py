"""Seconds of the main job's masked phases (emoji-mask sampling, the reference and training passes
of GRPO, the held-out game's sampling) with the output head over the tokens the mask allows,
then with the sampler's merged W + BA as well (float32), against the whole vocabulary.

    python bench/masked_head.py --checkpoint runs/sft/checkpoints/step_1200   # 5 rounds each way, from the main job's SFT
    python bench/masked_head.py --rounds 1 --targets 4   # smoke run

The three ways run in one process on the same policy, alternated round by round (the order
reversed every round), so machine noise falls on all alike: "whole" sets the head back to every
column (`allowed_columns` returning None, as for a mask that allows more than a quarter of the
vocabulary) and samples with the unmerged adapter, "columns" narrows the head only, "merged"
(the backend as it runs) narrows it and samples with the merged weights. Each round samples the
main job's GRPO step (`--targets` x `--group` episodes, 24 new tokens, temperature 0.5) and the
held-out game's first turns (`--game` rows at temperature 0.3: the bench's 16 messages in turn, so
rows repeat a prompt, as a GRPO group does) with the same seeds every way, then scores the GRPO
samples (reference pass) and trains on them (forward_backward "ppo", no
optimizer step). It prints the medians, the speedups over the first way, how many samples came
out alike every way and the largest logprob difference between the ways. `--ways columns merged
--rounds 10` times the merged sampler alone.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import MESSAGES, machine, parser as bench_parser, print_header  # noqa: E402
from rollouts import build  # noqa: E402

WAYS = ("whole", "columns", "merged")  # every column unmerged; the allowed columns; and the merged sampler (float32)
PHASES = ("grpo_sampling", "reference", "training", "game_sampling")


def run(args) -> dict:
    import torch

    from emojikit.api.policy import Datum, SamplingParams
    from emojikit_local import sampling, scoring

    torch.set_num_threads(args.threads)
    start = args.checkpoint
    policy = build("backend", "local", args.seed, **({"init_from": start} if start else {"lora_layers": 10}))
    decoder = build("decoder", "emoji-mask", args.seed)
    merged = policy.merged_sampling
    real = {module: module.allowed_columns for module in (sampling, scoring)}

    def use_way(name: str) -> None:
        for module, columns in real.items():
            module.allowed_columns = (lambda *a, **k: None) if name == "whole" else columns
        policy.merged_sampling = merged if name == "merged" else None

    messages = (MESSAGES * (1 + max(args.targets, args.game) // len(MESSAGES)))
    grpo_prompts = [[{"role": "user", "content": m}] for m in messages[: args.targets]]
    game_prompts = [[{"role": "user", "content": m}] for m in messages[: args.game]]
    ways = [w for w in WAYS if w in args.ways]
    seconds = {s: {p: [] for p in PHASES} for s in ways}
    drawn = {s: [] for s in ways}
    try:
        for round_ in range(args.rounds + 1):  # round 0 warms every way up and is not counted
            for name in ways if round_ % 2 else reversed(ways):  # the order reversed every round
                use_way(name)
                timed = {}
                started = time.perf_counter()
                groups = policy.sample(grpo_prompts, args.group, SamplingParams(max_tokens=24, temperature=0.5, seed=round_), decoder)
                timed["grpo_sampling"] = time.perf_counter() - started
                datums = [Datum.from_sample(s, advantage=float(i % 2) - 0.5, decoded=True, decode_budget=24) for g in groups for i, s in enumerate(g)]
                started = time.perf_counter()
                policy.compute_logprobs(datums, temperature=0.5, decoder=decoder, reference=True, weighted_only=True)
                timed["reference"] = time.perf_counter() - started
                started = time.perf_counter()
                policy.forward_backward(datums, "ppo", temperature=0.5, decoder=decoder)
                timed["training"] = time.perf_counter() - started
                for p in policy.trainable:
                    p.grad = None
                started = time.perf_counter()
                game = policy.sample(game_prompts, 1, SamplingParams(max_tokens=24, temperature=0.3, seed=round_), decoder)
                timed["game_sampling"] = time.perf_counter() - started
                if round_:
                    for phase, value in timed.items():
                        seconds[name][phase].append(value)
                drawn[name].append([s for g in groups + game for s in g])
    finally:
        use_way("merged")
    same = sum(all(a.tokens == b.tokens for b in others) for rounds in zip(*drawn.values()) for a, *others in zip(*rounds))
    total = sum(len(samples) for samples in drawn[ways[0]])
    gap = max((abs(x - y) for rounds in zip(*drawn.values()) for a, *others in zip(*rounds) for b in others
               if a.tokens == b.tokens for x, y in zip(a.logprobs, b.logprobs)), default=0.0)
    medians = {s: {p: statistics.median(seconds[s][p]) for p in PHASES} for s in ways}
    return {
        "machine": machine(),
        "config": {"threads": args.threads, "rounds": args.rounds, "targets": args.targets, "group": args.group, "game": args.game,
                   "sender": start or "fresh LoRA in the last 10 layers", "dtype": policy.dtype, "merged_sampler": merged is not None},
        "ways": ways,
        "rows": [{"phase": p} | {f"{s}_s": round(medians[s][p], 3) for s in ways}
                 | {f"{s}_speedup": round(medians[ways[0]][p] / medians[s][p], 2) for s in ways[1:]} for p in PHASES],
        "same_tokens": f"{same}/{total}",
        "max_logprob_gap": gap,
    }


def main() -> None:
    parser = bench_parser(__doc__, threads=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ways", nargs="+", choices=WAYS, default=list(WAYS), help="which ways to time (the speedups are over the first)")
    parser.add_argument("--targets", type=int, default=16, help="GRPO targets a step (recipes/grpo.toml: 16)")
    parser.add_argument("--group", type=int, default=4, help="episodes a target (recipes/grpo.toml: 4)")
    parser.add_argument("--game", type=int, default=64, help="held-out game rows sampled once each (the bench's 16 messages in turn)")
    parser.add_argument("--checkpoint", help="a checkpoint to start from (runs/sft/checkpoints/step_1200: the main job's SFT); a fresh LoRA in the last 10 layers without")
    args = parser.parse_args()
    result = run(args)
    if print_header(result, args.json):
        return
    ways = result["ways"]
    print(f"{'phase':<15}" + "".join(f"{w + ' s':>11}" for w in ways) + "".join(f"{w + ' x':>11}" for w in ways[1:]) + f"   (speedups over {ways[0]})")
    for row in result["rows"]:
        print(f"{row['phase']:<15}" + "".join(f"{row[w + '_s']:>11.3f}" for w in ways) + "".join(f"{row[w + '_speedup']:>10.2f}x" for w in ways[1:]))
    print(f"samples alike every way: {result['same_tokens']}; largest logprob gap between the ways: {result['max_logprob_gap']:.2e}")


if __name__ == "__main__":
    main()
