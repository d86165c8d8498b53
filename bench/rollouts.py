"""Multi-turn rollouts: the batched game (emojikit.play.game.play) vs the same episodes one at a time.

    python bench/rollouts.py                       # 8 targets x group 4, 3 turns, a table
    python bench/rollouts.py --json
    python bench/rollouts.py --targets 2 --group-size 2 --max-turns 2   # smoke run

Both ways use the same sender (the local backend, bundled SmolLM2, fresh LoRA), emoji-mask
decoder, retrieval judge, similarity reward, targets (from the `generated` prompt source) and
sampling seed. Batched: one `play` call, so each turn is one `policy.sample` call over every
live episode, one judge call and one similarity call. One at a time (the original project's
design): one `play` call per episode, so one sample call per episode per turn. Reports
episodes per second for each and the ratio; the one-at-a-time pass runs first so any warm-up
(MiniLM load, decoder build) is charged to it, not to the batched pass.
"""

from __future__ import annotations

import time
from pathlib import Path

import sys

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, parser as bench_parser, print_header  # noqa: E402


def build(kind_table: str, name: str, seed: int, **overrides):
    """A registered component with its default config, `overrides` set (e.g. init_from=...)."""
    from emojikit.api.components import BuildContext
    from emojikit.composition.recipe import COMPONENT_TABLES
    from emojikit.composition.registry import get_registry

    spec = get_registry().get(COMPONENT_TABLES[kind_table], name)
    config = spec.config(**overrides)
    ctx = BuildContext(seed=seed)
    if spec.preflight is not None:
        spec.preflight(config, ctx)
    return spec.factory(config, ctx)


def run(args) -> dict:
    import torch

    from emojikit.play.game import GameSettings, play
    from emojikit.api.policy import SamplingParams

    if args.threads:
        torch.set_num_threads(args.threads)
    policy = build("backend", "local", args.seed)
    decoder, judge, reward = build("decoder", "emoji-mask", args.seed), build("judge", "retrieval", args.seed), build("reward", "similarity", args.seed)
    targets = list(build("prompts", "generated", args.seed).messages(args.targets))
    settings = GameSettings(max_turns=args.max_turns, max_new_tokens=args.new_tokens)
    sampling = SamplingParams(temperature=1.0, seed=args.seed)
    judge.add_candidates([m.text for m in targets])
    play(policy, decoder, judge, reward, targets[:1], settings=settings, sampling=sampling)  # warm-up: decoder tables, MiniLM

    def counts(episodes) -> dict:
        return {"episodes": len(episodes), "turns": sum(len(ep.turns) for ep in episodes), "success_rate": round(sum(ep.success for ep in episodes) / len(episodes), 3)}

    started = time.perf_counter()
    one_by_one = [ep for m in targets for _ in range(args.group_size) for ep in play(policy, decoder, judge, reward, [m], settings=settings, sampling=sampling)]
    sequential_s = time.perf_counter() - started

    started = time.perf_counter()
    batched = play(policy, decoder, judge, reward, targets, settings=settings, sampling=sampling, group_size=args.group_size)
    batched_s = time.perf_counter() - started

    return {
        "config": {"targets": args.targets, "group_size": args.group_size, "max_turns": args.max_turns, "new_tokens": args.new_tokens, "threads": torch.get_num_threads()},
        "machine": machine(),
        "batched": {"seconds": round(batched_s, 2), "episodes_per_s": round(len(batched) / batched_s, 3), **counts(batched)},
        "one_at_a_time": {"seconds": round(sequential_s, 2), "episodes_per_s": round(len(one_by_one) / sequential_s, 3), **counts(one_by_one)},
        "speedup": round(sequential_s / batched_s * len(batched) / len(one_by_one), 2),
    }


def main(argv=None) -> None:
    parser = bench_parser(__doc__, threads=0)
    parser.add_argument("--targets", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=24, help="sender tokens per turn (the game's default)")
    args = parser.parse_args(argv)
    result = run(args)
    if print_header(result, args.json):
        return
    print(f"{'':16}{'seconds':>10}{'episodes/s':>12}{'turns':>8}{'success':>9}")
    for key in ("batched", "one_at_a_time"):
        r = result[key]
        print(f"{key:16}{r['seconds']:>10}{r['episodes_per_s']:>12}{r['turns']:>8}{r['success_rate']:>9}")
    print(f"batched / one at a time: {result['speedup']}x episodes per second")


if __name__ == "__main__":
    main()
