"""Seconds per SFT step (forward_backward + optim_step of one batch) on the bundled SmolLM2,
for the local backend's precision and micro-batch settings, alternated in one process.

    python bench/sft_step.py                  # batch 16, 5 rounds, a table
    python bench/sft_step.py --json
    python bench/sft_step.py --rounds 1 --batch 4   # smoke run

Every setting trains its own fresh LoRA (same seed) on the same batches of the SFT training
file (`emojikit run recipes/data.toml` makes it), one step per setting per round, so machine
noise falls on all of them alike. Settings:
  fp32 / micro 8     the backend's defaults (the baseline)
  fp32 / micro 16    one forward pass per batch of 16
  bf16 / micro 8     frozen base projections in bfloat16 (`base_matmul_dtype`), LoRA in fp32
  bf16 / micro 16    both: what recipes/sft.toml uses
  bf16 compute / micro 16   `dtype = "bfloat16"`: every projection and the head in bf16, fp32 results
`--settings` picks some of them by number (0-4), e.g. `--settings 0 3 4`.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, parser as bench_parser, peak_rss_mb, print_header, require_data  # noqa: E402

SETTINGS = [("float32", 8), ("float32", 16), ("bfloat16", 8), ("bfloat16", 16), ("compute:bfloat16", 16)]


def setting_config(dtype: str, micro: int) -> dict:
    if dtype.startswith("compute:"):
        return {"dtype": dtype.removeprefix("compute:"), "micro_batch_size": micro}
    return {"base_matmul_dtype": dtype, "micro_batch_size": micro}


def setting_name(dtype: str, micro: int) -> str:
    if dtype.startswith("compute:"):
        return f"bf16 compute / micro {micro}"
    return f"{'bf16' if dtype == 'bfloat16' else 'fp32'} / micro {micro}"


def run(args) -> dict:
    import torch

    from emojikit.support.bundled import SMOLLM2
    from emojikit.api.policy import AdamParams
    from emojikit.training.sft import batch_indices, chat_datum, load_chats
    from emojikit_local.config import LocalConfig
    from emojikit.support.models import load_model_and_tokenizer
    from emojikit_local.policy import LocalPolicy

    if args.threads:
        torch.set_num_threads(args.threads)
    require_data(args.train_file)
    chats = load_chats(args.train_file, limit=args.batch * (args.rounds + 1))
    policies = {}
    for dtype, micro in [SETTINGS[i] for i in args.settings]:
        model, tokenizer = load_model_and_tokenizer(SMOLLM2)
        policies[(dtype, micro)] = LocalPolicy(model, tokenizer, LocalConfig(**setting_config(dtype, micro)), seed=args.seed)

    def step(policy, index: int) -> tuple[float, float, float]:
        batch = [chats[i] for i in batch_indices(len(chats), args.batch, index, args.seed)]
        datums = [chat_datum(policy, chat) for chat in batch]
        started, cpu = time.perf_counter(), time.process_time()
        out = policy.forward_backward(datums, "cross_entropy")
        policy.optim_step(AdamParams(learning_rate=1e-3))
        cpu_seconds[id(policy)].append(time.process_time() - cpu)  # robust to other processes on the core
        return time.perf_counter() - started, out.loss, sum(len(d.model_input) for d in datums)

    seconds = {key: [] for key in policies}
    cpu_seconds = {id(policy): [] for policy in policies.values()}
    losses = {key: [] for key in policies}
    tokens = []
    for index in range(args.rounds + 1):  # round 0 warms up every setting
        for key, policy in policies.items():
            elapsed, loss, batch_tokens = step(policy, index)
            if index:
                seconds[key].append(elapsed)
                losses[key].append(loss)
        if index:
            tokens.append(batch_tokens)
    base = statistics.median(seconds[SETTINGS[args.settings[0]]])
    base_cpu = statistics.median(cpu_seconds[id(policies[SETTINGS[args.settings[0]]])][1:])
    rows = []
    for (dtype, micro), values in seconds.items():
        median = statistics.median(values)
        rows.append({
            "setting": setting_name(dtype, micro),
            "seconds_per_step": round(median, 3),
            "cpu_seconds_per_step": round(statistics.median(cpu_seconds[id(policies[(dtype, micro)])][1:]), 3),
            "tokens_per_second": round(sum(tokens) / sum(values), 1),
            "speedup": round(base / median, 2),
            "cpu_speedup": round(base_cpu / statistics.median(cpu_seconds[id(policies[(dtype, micro)])][1:]), 2),
            "mean_loss": round(statistics.mean(losses[(dtype, micro)]), 4),
        })
    return {
        "machine": machine(),
        "config": {"batch": args.batch, "rounds": args.rounds, "threads": torch.get_num_threads(), "train_file": str(args.train_file)},
        "rows": rows,
        "peak_rss_mb": round(peak_rss_mb()),
    }


def main() -> None:
    parser = bench_parser(__doc__, threads=0)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--settings", type=int, nargs="+", default=list(range(len(SETTINGS))), help="which settings (0-4, the first is the baseline)")
    parser.add_argument("--train-file", type=Path, default=Path("runs/data/sft_train.jsonl"))
    args = parser.parse_args()
    result = run(args)
    if print_header(result, args.json):
        return
    print(f"{'setting':<26} {'s/step':>8} {'CPU s':>7} {'tokens/s':>9} {'speedup':>8} {'CPU speedup':>12} {'mean loss':>10}")
    for row in result["rows"]:
        print(f"{row['setting']:<26} {row['seconds_per_step']:>8.3f} {row['cpu_seconds_per_step']:>7.3f} {row['tokens_per_second']:>9.1f} {row['speedup']:>7.2f}x {row['cpu_speedup']:>11.2f}x {row['mean_loss']:>10.4f}")
    print(f"peak RSS: {result['peak_rss_mb']} MB (all settings' models in one process)")


if __name__ == "__main__":
    main()
