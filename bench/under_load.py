"""Seconds per SFT step of the bundled SmolLM2 alone and beside one competing CPU-bound process,
for torch thread settings and OpenMP wait policies: how much a busy machine slows a step.

    python bench/under_load.py                   # threads 1 and 2 x wait policy default/PASSIVE, a table
    python bench/under_load.py --json
    python bench/under_load.py --threads 2 --nice 0  # one thread setting; an un-niced competitor
    taskset -c 1 python bench/under_load.py --threads 1 --wait-policy PASSIVE --steps 1 --rounds 1 --batch 2  # smoke run

Issue 20 saw a step go from 2.7 s to 7-54 s while one other (niced) process used the second
core: torch's worker threads spin-wait for each other, and one of them is descheduled. Every
setting runs in its own worker process (OMP_WAIT_POLICY is read once, when the OpenMP runtime
starts), which loads the model once, warms up with one step, then alternates `--rounds` times:
`--steps` steps alone, then `--steps` steps while a competitor (`python -c "while True: pass"`,
at nice `--nice`) runs beside it. The step is the one recipes/sft.toml trains: LoRA on the
bundled model, bf16 base projections, one micro-batch of `--batch` chats (the SFT training file
`emojikit run recipes/data.toml` makes, or chats built from bench/common's messages without it).
The table gives the median seconds per step alone and loaded and their ratio, the slowdown; the
issue's goal is a slowdown of at most 2.5x with the settings chosen by default.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import MESSAGES, machine, parser as bench_parser, print_header  # noqa: E402

THREAD_SETTINGS = (1, 2)
WAIT_POLICIES = ("default", "PASSIVE")  # default: OMP_WAIT_POLICY unset (the runtime's own choice)
GOAL = 2.5  # issue 20: one competing process slows a step at most this much
BUSY_LOOP = "while True: pass"


def chats(train_file: Path, n: int) -> tuple[list, str]:
    from emojikit.api.format import DEFAULT_FORMAT
    from emojikit.training.sft import load_chats

    if train_file.exists():
        return load_chats(train_file, limit=n), str(train_file)
    answers = ["🍕🎉", "☔😞", "🐶🏃", "🎸🔥🎶", "✈️🗼", "🌞🏖️"]
    built = [
        [{"role": "system", "content": DEFAULT_FORMAT.system_prompt}, {"role": "user", "content": MESSAGES[i % len(MESSAGES)]},
         {"role": "assistant", "content": answers[i % len(answers)]}]
        for i in range(n)
    ]
    return built, "bench/common.py MESSAGES (no SFT training file)"


def start_competitor(nice: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", BUSY_LOOP], preexec_fn=(lambda: os.nice(nice)) if nice else None)


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    process.wait(timeout=30)


def worker(args) -> dict:
    """One setting, in this process: the environment (OMP_WAIT_POLICY, OMP_NUM_THREADS) was set
    by the parent before torch loads."""
    import torch

    from emojikit.support.bundled import SMOLLM2
    from emojikit.api.policy import AdamParams
    from emojikit.training.sft import batch_indices, chat_datum
    from emojikit_local.config import LocalConfig
    from emojikit_local.loading import load_model_and_tokenizer
    from emojikit_local.policy import LocalPolicy

    torch.set_num_threads(args.threads)
    data, source = chats(args.train_file, args.batch * 8)
    model, tokenizer = load_model_and_tokenizer(SMOLLM2)
    policy = LocalPolicy(model, tokenizer, LocalConfig(base_matmul_dtype="bfloat16", micro_batch_size=args.batch), seed=args.seed)
    index = 0

    def step() -> float:
        nonlocal index
        batch = [data[i] for i in batch_indices(len(data), args.batch, index, args.seed)]
        index += 1
        datums = [chat_datum(policy, chat) for chat in batch]
        started = time.perf_counter()
        policy.forward_backward(datums, "cross_entropy")
        policy.optim_step(AdamParams(learning_rate=1e-3))
        return time.perf_counter() - started

    step()  # warm-up
    alone, loaded = [], []
    for _ in range(args.rounds):
        alone += [step() for _ in range(args.steps)]
        competitor = start_competitor(args.nice)
        try:
            time.sleep(args.ramp_s)  # let the scheduler see it as CPU-bound
            loaded += [step() for _ in range(args.steps)]
        finally:
            stop(competitor)
    return {"alone": alone, "loaded": loaded, "torch_threads": torch.get_num_threads(), "data": source}


def run_setting(args, threads: int, policy: str) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    env.pop("OMP_WAIT_POLICY", None)
    if policy != "default":
        env["OMP_WAIT_POLICY"] = policy
    command = [sys.executable, __file__, "--worker", "--threads", str(threads), "--seed", str(args.seed), "--batch", str(args.batch),
               "--steps", str(args.steps), "--rounds", str(args.rounds), "--nice", str(args.nice), "--ramp-s", str(args.ramp_s),
               "--train-file", str(args.train_file)]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"worker (threads {threads}, wait policy {policy}) failed:\n{done.stderr[-3000:]}")
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    alone, loaded = statistics.median(measured["alone"]), statistics.median(measured["loaded"])
    return {
        "threads": threads,
        "wait_policy": policy,
        "alone_s": round(alone, 3),
        "loaded_s": round(loaded, 3),
        "slowdown": round(loaded / alone, 2),
        "loaded_max_s": round(max(measured["loaded"]), 3),
        "within_goal": loaded / alone <= GOAL,
        "torch_threads": measured["torch_threads"],
        "data": measured["data"],
    }


def run(args) -> dict:
    threads = (args.threads,) if args.threads else THREAD_SETTINGS
    policies = WAIT_POLICIES if args.wait_policy == "both" else (args.wait_policy,)
    rows = [run_setting(args, t, policy) for t in threads for policy in policies]
    return {
        "machine": machine(),
        "config": {"batch": args.batch, "steps": args.steps, "rounds": args.rounds, "competitor_nice": args.nice, "data": rows[0]["data"],
                   "step": "SFT forward_backward + optim_step, bf16 base projections, one micro-batch"},
        "rows": rows,
        "goal_slowdown": GOAL,
    }


def main() -> None:
    parser = bench_parser(__doc__, threads=0)
    parser.description += " (--threads N: only that setting; 0: 1 and 2)"
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=3, help="steps per phase (alone, then loaded)")
    parser.add_argument("--rounds", type=int, default=3, help="alternations of the alone and loaded phases")
    parser.add_argument("--wait-policy", choices=("both", *WAIT_POLICIES), default="both", help="OMP_WAIT_POLICY settings to measure")
    parser.add_argument("--nice", type=int, default=10, help="niceness of the competing process (the issue's case: niced)")
    parser.add_argument("--ramp-s", type=float, default=1.0, help="seconds the competitor runs before the loaded steps start")
    parser.add_argument("--train-file", type=Path, default=Path("runs/data/sft_train.jsonl"))
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # one setting, run by the parent
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args)))
        return
    result = run(args)
    if print_header(result, args.json):
        return
    print(f"{'threads':>7} {'wait policy':<12} {'alone s/step':>12} {'loaded s/step':>13} {'slowdown':>9} {'loaded max':>10}")
    for row in result["rows"]:
        mark = "" if row["within_goal"] else f"  over {GOAL}x"
        print(f"{row['threads']:>7} {row['wait_policy']:<12} {row['alone_s']:>12.3f} {row['loaded_s']:>13.3f} {row['slowdown']:>8.2f}x {row['loaded_max_s']:>10.3f}{mark}")


if __name__ == "__main__":
    main()
