"""Seconds per SFT step of the bundled SmolLM2 alone and beside competing processes, for torch
thread settings and OpenMP wait policies: how much a busy machine slows a step.

    python bench/under_load.py                   # threads 1 and 2 x wait policy default/emojikit/PASSIVE, two small-op competitors
    python bench/under_load.py --json
    python bench/under_load.py --threads 2 --wait-policy PASSIVE spin3000   # some settings only
    python bench/under_load.py --threads 2 --wait-policy emojikit --parallel rows ops --lora-layers 10   # rows or products split across threads
    python bench/under_load.py --competitor busy --competitors 1 --nice 10  # the case first reported: one niced busy loop
    taskset -c 1 python bench/under_load.py --threads 1 --wait-policy PASSIVE --steps 1 --rounds 1 --batch 2  # smoke run

Every setting runs in its own worker process (OMP_WAIT_POLICY and GOMP_SPINCOUNT are read once,
when the OpenMP runtime starts; `default` unsets both, which is the runtime's own choice, not
emojikit's), which loads the model once, warms up with one step, then alternates `--rounds`
times: `--steps` steps alone, then `--steps` steps while `--competitors` processes run beside
it. The default competitor is the shape of a generation: a two-thread torch process of small
products under the runtime's default wait policy (two of them by default: a fair share of the
CPU is then a 3x slowdown, the goal at most 4x); `busy` is a pure-Python loop (the goal beside
one: 2.5x). The step is the one recipes/sft.toml trains: LoRA on the bundled model,
`dtype = "auto"` (bf16 where the CPU has bf16 units, else float32), one micro-batch of
`--batch` chats (the SFT training file `emojikit run recipes/data.toml` makes, or chats built
from bench/common's messages without it). The table gives the median seconds per step alone and
loaded, their ratio (the slowdown) and the slowest loaded step. `--parallel` compares the local
backend's two ways of sharing a pass among two threads: each thread its own rows of the batch
(`rows`) or every product split across them (`ops`); `auto`, the backend's default, is rows where
the step computes in float32 and ops in bf16.
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

from emojikit.support.cpu import cpu_features  # noqa: E402
from emojikit.support.torch_env import WAIT_VARIABLES, wait_policy_environment  # noqa: E402

THREAD_SETTINGS = (1, 2)
# default: OMP_WAIT_POLICY unset (the runtime's own choice: spin a while, then sleep);
# emojikit: what the `emojikit` command sets on this CPU (torch_env.wait_policy_environment);
# PASSIVE: sleep at once; spin<N>: GOMP_SPINCOUNT=N, spin N rounds before sleeping (libgomp).
WAIT_POLICIES = ("default", "emojikit", "PASSIVE")
GOALS = {"busy": 2.5, "small-ops": 4.0}  # slowdown goals: beside one busy loop; beside two small-op processes (a fair share is 3x)
COMPETITORS = {
    # A pure-Python loop: one core's worth of CPU, no threads of its own.
    "busy": "while True: pass",
    # The shape of a generation: a two-thread torch process of small products (a batch-1 decode
    # of a 135M model: [1, 576] x [576, 1536] and back), under the runtime's default wait policy.
    "small-ops": (
        "import torch\n"
        "torch.set_num_threads(2)\n"
        "x = torch.randn(1, 576); up = torch.randn(576, 1536); down = torch.randn(1536, 576)\n"
        "while True:\n"
        "    for _ in range(30):\n"
        "        x = torch.tanh((x @ up) @ down)\n"
    ),
}


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


def start_competitors(kind: str, count: int, nice: int) -> list[subprocess.Popen]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("OMP_", "GOMP_", "MKL_"))}
    return [subprocess.Popen([sys.executable, "-c", COMPETITORS[kind]], env=env, preexec_fn=(lambda: os.nice(nice)) if nice else None) for _ in range(count)]


def stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        process.terminate()
    for process in processes:
        process.wait(timeout=30)


def worker(args) -> dict:
    """One setting, in this process: the environment (OMP_WAIT_POLICY, OMP_NUM_THREADS) was set
    by the parent before torch loads."""
    if args.wait_policy == ["default"]:
        # bench/common set emojikit's own default on import; the runtime's default is neither variable
        for key in WAIT_VARIABLES:
            os.environ.pop(key, None)
    import torch

    from emojikit.support.bundled import SMOLLM2
    from emojikit.api.policy import AdamParams
    from emojikit.training.sft import batch_indices, chat_datum
    from emojikit_local.config import LocalConfig
    from emojikit.support.models import load_model_and_tokenizer
    from emojikit_local.policy import LocalPolicy

    torch.set_num_threads(args.threads)
    data, source = chats(args.train_file, args.batch * 8)
    model, tokenizer = load_model_and_tokenizer(SMOLLM2)
    config = LocalConfig(dtype="auto", micro_batch_size=args.batch, parallel=args.parallel[0], lora_layers=args.lora_layers)
    policy = LocalPolicy(model, tokenizer, config, seed=args.seed)
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
        competitors = start_competitors(args.competitor, args.competitors, args.nice)
        try:
            time.sleep(args.ramp_s)  # let the scheduler see them as CPU-bound (and torch load in them)
            loaded += [step() for _ in range(args.steps)]
        finally:
            stop(competitors)
    return {"alone": alone, "loaded": loaded, "torch_threads": torch.get_num_threads(), "data": source,
            "environment": {k: os.environ.get(k) for k in WAIT_VARIABLES}}


def run_setting(args, threads: int, policy: str, parallel: str) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    for key in WAIT_VARIABLES:
        env.pop(key, None)
    if policy == "emojikit":
        env.update(wait_policy_environment(cpu_features()))
    elif policy.startswith("spin"):
        env["GOMP_SPINCOUNT"] = policy.removeprefix("spin")
    elif policy != "default":
        env["OMP_WAIT_POLICY"] = policy
    command = [sys.executable, __file__, "--worker", "--threads", str(threads), "--seed", str(args.seed), "--batch", str(args.batch),
               "--steps", str(args.steps), "--rounds", str(args.rounds), "--nice", str(args.nice), "--ramp-s", str(args.ramp_s),
               "--train-file", str(args.train_file), "--competitor", args.competitor, "--competitors", str(args.competitors),
               "--wait-policy", policy, "--parallel", parallel] + (["--lora-layers", str(args.lora_layers)] if args.lora_layers else [])
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"worker (threads {threads}, wait policy {policy}, parallel {parallel}) failed:\n{done.stderr[-3000:]}")
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    alone, loaded = statistics.median(measured["alone"]), statistics.median(measured["loaded"])
    return {
        "threads": threads,
        "wait_policy": policy,
        "parallel": parallel,
        "alone_s": round(alone, 3),
        "loaded_s": round(loaded, 3),
        "slowdown": round(loaded / alone, 2),
        "loaded_max_s": round(max(measured["loaded"]), 3),
        "within_goal": loaded / alone <= GOALS[args.competitor],
        "torch_threads": measured["torch_threads"],
        "environment": measured["environment"],  # what the worker's OpenMP runtime read
        "data": measured["data"],
    }


def run(args) -> dict:
    threads = (args.threads,) if args.threads else THREAD_SETTINGS
    policies = args.wait_policy or WAIT_POLICIES
    rows = [run_setting(args, t, policy, parallel) for t in threads for policy in policies for parallel in (args.parallel if t > 1 else args.parallel[:1])]
    return {
        "machine": machine(),
        "config": {"batch": args.batch, "steps": args.steps, "rounds": args.rounds, "competitor": args.competitor, "competitors": args.competitors,
                   "competitor_nice": args.nice, "data": rows[0]["data"], "lora_layers": args.lora_layers or "all",
                   "step": "SFT forward_backward + optim_step, dtype auto, one micro-batch"},
        "rows": rows,
        "goal_slowdown": GOALS[args.competitor],
    }


def main() -> None:
    parser = bench_parser(__doc__, threads=0)
    parser.description += " (--threads N: only that setting; 0: 1 and 2)"
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=3, help="steps per phase (alone, then loaded)")
    parser.add_argument("--rounds", type=int, default=3, help="alternations of the alone and loaded phases")
    parser.add_argument("--wait-policy", nargs="+", help="wait policies to measure: default, emojikit (what the command sets on this CPU), PASSIVE, ACTIVE, spin<N> (GOMP_SPINCOUNT); default: default, emojikit and PASSIVE")
    parser.add_argument("--competitor", choices=tuple(COMPETITORS), default="small-ops", help="what runs beside the step: small-ops (a two-thread torch process of small products, the shape of a generation) or busy (a pure-Python loop)")
    parser.add_argument("--competitors", type=int, default=2, help="how many competing processes")
    parser.add_argument("--nice", type=int, default=0, help="niceness of the competing processes (the case first reported: 10)")
    parser.add_argument("--ramp-s", type=float, default=2.0, help="seconds the competitors run before the loaded steps start")
    parser.add_argument("--parallel", nargs="+", choices=("auto", "rows", "ops"), default=["auto"], help="how two or more threads share the step: the local backend's parallel setting, auto (its default: rows in float32, ops in bf16), rows or ops; several: each in turn")
    parser.add_argument("--lora-layers", type=int, help="LoRA in the last N layers (recipes/sft.toml: 10); default: every layer")
    parser.add_argument("--train-file", type=Path, default=Path("runs/data/sft_train.jsonl"))
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # one setting, run by the parent
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args)))
        return
    result = run(args)
    if print_header(result, args.json):
        return
    print(f"{'threads':>7} {'wait policy':<12} {'parallel':<8} {'alone s/step':>12} {'loaded s/step':>13} {'slowdown':>9} {'loaded max':>10}")
    for row in result["rows"]:
        mark = "" if row["within_goal"] else f"  over {result['goal_slowdown']}x"
        parallel = row["parallel"] if row["threads"] > 1 else "-"
        print(f"{row['threads']:>7} {row['wait_policy']:<12} {parallel:<8} {row['alone_s']:>12.3f} {row['loaded_s']:>13.3f} {row['slowdown']:>8.2f}x {row['loaded_max_s']:>10.3f}{mark}")


if __name__ == "__main__":
    main()
