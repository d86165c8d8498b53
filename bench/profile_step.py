"""Where the time of one GRPO step goes, on the offline recipe's components (CPU).

    python bench/profile_step.py                    # 8 targets x group 4, 3 turns, a table
    python bench/profile_step.py --json
    python bench/profile_step.py --targets 2 --steps 1   # smoke run
    python bench/profile_step.py --torch-ops 15     # also the top torch ops of the last step

A step is what emojikit/training/grpo.py does: the batched game (local backend with a fresh LoRA,
emoji-mask decoder, retrieval judge, similarity reward) -> group-relative advantages -> datums
-> forward_backward("ppo") -> optim_step. The policy, judge and reward are wrapped so every
call is timed: sample, judge (guess), reward (similarity + score), forward_backward,
optim_step; "other" is the rest (datums, prompts, bookkeeping). Figures are medians over the
steps after a warm-up step.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, peak_rss_mb, parser as bench_parser, print_header  # noqa: E402
from rollouts import build  # noqa: E402

PHASES = ("sample", "judge", "reward", "forward_backward", "optim_step", "other")


class Timed:
    """Forwards attribute access to `inner`, timing the named methods into `clock[phase]`."""

    def __init__(self, inner, clock: dict, methods: dict[str, str]):
        self._inner, self._clock, self._methods = inner, clock, methods

    def __getattr__(self, name):
        value = getattr(self._inner, name)
        if name not in self._methods:
            return value
        phase = self._methods[name]

        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return value(*args, **kwargs)
            finally:
                self._clock[phase] += time.perf_counter() - started

        return timed


def run(args) -> dict:
    import torch

    from emojikit.play.game import GameSettings, play
    from emojikit.training.grpo import episode_datums, group_advantages
    from emojikit.api.policy import AdamParams, SamplingParams

    if args.threads:
        torch.set_num_threads(args.threads)
    clock: dict[str, float] = defaultdict(float)
    policy = Timed(build("backend", "local", args.seed), clock, {"sample": "sample", "forward_backward": "forward_backward", "optim_step": "optim_step"})
    decoder = build("decoder", "emoji-mask", args.seed)
    judge = Timed(build("judge", "retrieval", args.seed), clock, {"guess": "judge"})
    reward = Timed(build("reward", "similarity", args.seed), clock, {"similarity": "reward", "score": "reward"})
    source = build("prompts", "generated", args.seed)
    pool = list(source.messages(args.targets * (args.steps + 1)))
    settings = GameSettings(max_turns=args.max_turns, max_new_tokens=args.new_tokens)
    judge.add_candidates([m.text for m in pool])

    rows = []
    for step in range(args.steps + 1):
        clock.clear()
        targets = pool[step * args.targets : (step + 1) * args.targets]
        profiler = None
        if args.torch_ops and step == args.steps:
            profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
            profiler.__enter__()
        started = time.perf_counter()
        sampling = SamplingParams(max_tokens=settings.max_new_tokens, temperature=1.0, seed=args.seed * 100_003 + step)
        episodes = play(policy, decoder, judge, reward, targets, settings=settings, sampling=sampling, group_size=args.group_size)
        datums = []
        for g in range(len(targets)):
            group = episodes[g * args.group_size : (g + 1) * args.group_size]
            rewards_G = [ep.reward["total"] for ep in group]
            if max(rewards_G) - min(rewards_G) < 1e-9:
                continue  # as grpo.py: an all-equal group teaches nothing
            for episode, advantage in zip(group, group_advantages(rewards_G, True)):
                datums.extend(episode_datums(episode, advantage, settings.max_new_tokens))
        if datums:
            policy.forward_backward(datums, "ppo", temperature=1.0, decoder=decoder)
            policy.optim_step(AdamParams(learning_rate=1e-4))
        total = time.perf_counter() - started
        if profiler is not None:
            profiler.__exit__(None, None, None)
            ops = profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.torch_ops)
        row = {phase: clock.get(phase, 0.0) for phase in PHASES[:-1]}
        row["other"] = total - sum(row.values())
        row.update(total=total, datums=len(datums), sampled_tokens=sum(len(t.sample.tokens) for ep in episodes for t in ep.turns if t.sample), turns=sum(len(ep.turns) for ep in episodes))
        rows.append(row)

    timed_rows = rows[1:]
    median = {key: round(statistics.median(r[key] for r in timed_rows), 2) for key in (*PHASES, "total", "datums", "sampled_tokens", "turns")}
    result = {
        "config": {"targets": args.targets, "group_size": args.group_size, "max_turns": args.max_turns, "new_tokens": args.new_tokens, "steps": args.steps, "threads": torch.get_num_threads()},
        "machine": machine(),
        "median": median,
        "share": {phase: round(median[phase] / median["total"], 3) for phase in PHASES},
        "peak_rss_mb": round(peak_rss_mb(), 0),
    }
    if args.torch_ops:
        result["torch_ops"] = ops
    return result


def main(argv=None) -> None:
    parser = bench_parser(__doc__, threads=1)
    parser.add_argument("--targets", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=24)
    parser.add_argument("--steps", type=int, default=3, help="timed steps after one warm-up step")
    parser.add_argument("--torch-ops", type=int, default=0, help="print the top N torch ops of the last step")
    args = parser.parse_args(argv)
    result = run(args)
    if print_header(result, args.json):
        return
    m = result["median"]
    print(f"one step: {m['total']} s ({m['turns']} turns, {m['sampled_tokens']} sampled tokens, {m['datums']} datums); peak RSS {result['peak_rss_mb']} MB")
    for phase in PHASES:
        print(f"  {phase:18}{m[phase]:>8} s {100 * result['share'][phase]:>6.1f} %")
    if "torch_ops" in result:
        print(result["torch_ops"])


if __name__ == "__main__":
    main()
