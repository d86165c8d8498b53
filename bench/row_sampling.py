"""Seconds per sampling call of the game's shapes with the local backend's two ways of sharing it
among two threads: each thread decodes its own rows on one torch thread (`[backend] parallel =
"rows"`) or every product is split across the threads (`"ops"`), alternated in one process.

    python bench/row_sampling.py                             # 8 rounds, the bundled model
    python bench/row_sampling.py --checkpoint runs/sft/checkpoints/final   # a trained sender
    python bench/row_sampling.py --rounds 1 --prompts 8      # smoke run

Two calls a round for each side, the order swapped every round: a GRPO step's first turn
(`--prompts` everyday messages x 4 episodes, temperature 0.5) and the comparison's (`--prompts`
x 4 distinct messages once each, temperature 0.3), both under the emoji mask with the game's 24
new tokens. The messages are recipes/targets/real-texts.jsonl's, so no data run is needed. Both
sides hold the same weights; the tokens sampled are printed beside the seconds, since a side
that stopped sooner would look faster.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, parser as bench_parser, print_header  # noqa: E402

SIDES = ("rows", "ops")
ROOT = Path(__file__).resolve().parents[1]
SYSTEM = "Reply with 2-8 emoji only."


def run(args) -> dict:
    import torch

    from emojikit.api.policy import SamplingParams
    from emojikit.support.bundled import SMOLLM2
    from emojikit_emoji_mask.decoder import EmojiMaskDecoder
    from emojikit_local.config import LocalConfig
    from emojikit.support.models import load_model_and_tokenizer
    from emojikit_local.policy import LocalPolicy

    torch.set_num_threads(args.threads)
    texts = [json.loads(line)["text"] for line in (ROOT / "recipes/targets/real-texts.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    policies = {}
    for side in SIDES:
        model, tokenizer = load_model_and_tokenizer(SMOLLM2)
        config = LocalConfig(dtype="auto", lora_layers=args.lora_layers, parallel=side, init_from=args.checkpoint)
        policies[side] = LocalPolicy(model, tokenizer, config, seed=args.seed)
    if policies["rows"].row_workers is None:
        raise SystemExit("row_sampling: rows need two or more torch threads (--threads)")
    decoder = EmojiMaskDecoder()
    calls = {
        "grpo_first_turn": dict(n=4, temperature=0.5, distinct=args.prompts),
        "comparison_first_turn": dict(n=1, temperature=0.3, distinct=4 * args.prompts),
    }
    seconds = {(side, call): [] for side in SIDES for call in calls}
    tokens = {(side, call): 0 for side in SIDES for call in calls}
    for round_ in range(args.rounds + 1):  # round 0 warms both up and is not counted
        for call, shape in calls.items():
            start = (round_ * shape["distinct"]) % len(texts)
            prompts = [[{"role": "system", "content": SYSTEM}, {"role": "user", "content": texts[(start + i) % len(texts)]}] for i in range(shape["distinct"])]
            params = SamplingParams(max_tokens=args.new_tokens, temperature=shape["temperature"], seed=args.seed + round_)
            for side in SIDES if round_ % 2 else reversed(SIDES):
                started = time.perf_counter()
                groups = policies[side].sample(prompts, shape["n"], params, decoder=decoder)
                if round_:
                    seconds[side, call].append(time.perf_counter() - started)
                    tokens[side, call] += sum(len(s.tokens) for group in groups for s in group)
    rows = [{"parallel": side, "call": call, "median_s": round(statistics.median(seconds[side, call]), 3),
             "tokens_per_s": round(tokens[side, call] / sum(seconds[side, call]), 1)} for call in calls for side in SIDES]
    return {
        "machine": machine(),
        "config": {"threads": args.threads, "rounds": args.rounds, "prompts": args.prompts, "new_tokens": args.new_tokens,
                   "lora_layers": args.lora_layers, "checkpoint": args.checkpoint, "dtype": "auto", "decoder": "emoji-mask"},
        "rows": rows,
        "ops_over_rows_median": {call: round(statistics.median(o / r for o, r in zip(seconds["ops", call], seconds["rows", call])), 3) for call in calls},
    }


def main() -> None:
    parser = bench_parser(__doc__, threads=2)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--prompts", type=int, default=16, help="distinct messages of a GRPO step (the main job's batch_size); the comparison call plays 4x as many")
    parser.add_argument("--new-tokens", type=int, default=24, help="[game] max_new_tokens")
    parser.add_argument("--lora-layers", type=int, default=10, help="the main job's until 2026-11-30, as this bench's logged figures (recipes/sft.toml now: 20)")
    parser.add_argument("--checkpoint", default=None, help="a saved adapter folder to start from, as [backend] init_from takes (default: a fresh LoRA on the bundled model)")
    args = parser.parse_args()
    result = run(args)
    if print_header(result, args.json):
        return
    print(f"{'call':<22} {'parallel':<9} {'median s':>9} {'tokens/s':>9}")
    for row in result["rows"]:
        print(f"{row['call']:<22} {row['parallel']:<9} {row['median_s']:>9.3f} {row['tokens_per_s']:>9.1f}")
    for call, ratio in result["ops_over_rows_median"].items():
        print(f"ops / rows, median over rounds, {call}: {ratio:.3f}")


if __name__ == "__main__":
    main()
