"""Throughput of the local backend: forward_backward and sampling tokens/s, and peak memory.

    python bench/backend.py                 # SmolLM2, batch 32 x 128 tokens, a table
    python bench/backend.py --json          # one JSON object
    python bench/backend.py --batch 8 --tokens 32 --threads 1

forward_backward runs cross_entropy over `batch` sequences of `tokens` tokens (loss on every
position); sampling decodes `batch` rows of up to `tokens` new tokens at temperature 1 (rows
that stop early count only the tokens they produced). Peak memory is the process's max RSS.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import parser as bench_parser, peak_rss_mb  # noqa: E402


def run(args) -> dict:
    import torch

    from emojikit.api.policy import AdamParams, Datum, SamplingParams
    from emojikit_local.config import LocalConfig
    from emojikit.support.models import load_model_and_tokenizer
    from emojikit_local.policy import LocalPolicy

    if args.threads:
        torch.set_num_threads(args.threads)
    started = time.perf_counter()
    config = LocalConfig(model=args.model, micro_batch_size=args.micro_batch_size, sample_batch_size=args.batch, dtype=args.dtype, base_matmul_dtype=args.base_matmul_dtype)
    model, tokenizer = load_model_and_tokenizer(config.model, device=config.device)  # fp32: the policy casts for dtype = "bfloat16"
    policy = LocalPolicy(model, tokenizer, config, seed=args.seed)
    load_s = time.perf_counter() - started

    g = torch.Generator().manual_seed(args.seed)
    datums = []
    for _ in range(args.batch):
        tokens = torch.randint(100, len(tokenizer), (args.tokens + 1,), generator=g).tolist()
        datums.append(Datum(model_input=tokens[:-1], target_tokens=tokens[1:], weights=[1.0] * args.tokens))
    started = time.perf_counter()
    policy.forward_backward(datums, "cross_entropy")
    policy.optim_step(AdamParams(learning_rate=1e-4))
    train_s = time.perf_counter() - started

    prompts = [[{"role": "user", "content": f"Tell me a long story about a {animal}."}] for animal in ("cat", "dog", "fox", "owl")]
    per_prompt = max(1, args.batch // len(prompts))
    started = time.perf_counter()
    groups = policy.sample(prompts, per_prompt, SamplingParams(max_tokens=args.tokens, temperature=1.0, seed=args.seed))
    sample_s = time.perf_counter() - started
    generated = sum(len(s.tokens) for group in groups for s in group)

    return {
        "model": args.model,
        "device": str(policy.device),
        "dtype": args.dtype,
        "base_matmul_dtype": args.base_matmul_dtype,
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "batch": args.batch,
        "tokens": args.tokens,
        "micro_batch_size": args.micro_batch_size,
        "load_s": round(load_s, 2),
        "forward_backward_s": round(train_s, 2),
        "forward_backward_tokens_per_s": round(args.batch * args.tokens / train_s, 1),
        "sample_s": round(sample_s, 2),
        "sampled_tokens": generated,
        "sampling_tokens_per_s": round(generated / sample_s, 1),
        "peak_rss_mb": round(peak_rss_mb(), 1),
    }


def main(argv=None) -> None:
    from emojikit.support.bundled import SMOLLM2

    parser = bench_parser(__doc__, threads=0)
    parser.add_argument("--model", default=SMOLLM2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--micro-batch-size", type=int, default=8)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--base-matmul-dtype", default="float32", choices=["float32", "bfloat16"], help="the backend's base_matmul_dtype (bfloat16: frozen base projections in bf16)")
    args = parser.parse_args(argv)
    result = run(args)
    if args.json:
        print(json.dumps(result))
        return
    width = max(len(k) for k in result)
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")


if __name__ == "__main__":
    main()
