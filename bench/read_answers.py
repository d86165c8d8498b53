"""The data stage's readings (`[data] score_answers`) in MiniLM's float32 against bfloat16.

    python bench/read_answers.py --train runs/data/sft_train.jsonl        # every pair, as recipes/data.toml reads them
    python bench/read_answers.py --configs float32/512 float32/2048 bfloat16/2048   # larger chunks of answers too
    python bench/read_answers.py --pairs 2000                              # smoke run

Reads every pair's teacher answer with recipes/data.toml's `[judge]` (a `panel` of `retrieval` and
`keywords`, the pool: every training message), once per configuration of `--configs`
(`encoder_dtype/READ_BATCH`), in this process, and prints the seconds of each, the pairs read per
second and, against the first configuration, the rank correlation of the readings and how many of
the best-read share (`--keep`, the share recipes/sft.toml trains on) both choose. As in the data
stage, the float32 MiniLM already holds every message (the lexicon teacher embedded them); a
bfloat16 one embeds them itself, inside its time.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, parser as bench_parser, print_header  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def best(readings: np.ndarray, share: float) -> set[int]:
    return set(np.argsort(-readings, kind="stable")[: round(share * len(readings))].tolist())


def run(args) -> dict:
    import torch
    from scipy.stats import spearmanr

    from emojikit.api.components import Message
    from emojikit.composition.recipe import load_recipe
    from emojikit.play.embedding import get_minilm
    from emojikit.training import data

    if args.threads:
        torch.set_num_threads(args.threads)
    rows = [json.loads(line) for line in Path(args.train).read_text(encoding="utf-8").splitlines()][: args.pairs or None]
    pairs = [(Message(r["messages"][1]["content"]), r["messages"][2]["content"]) for r in rows]
    messages = [m.text for m, _ in pairs]
    results, first = [], None
    for config in args.configs:
        dtype, batch = config.split("/")
        exact = get_minilm()
        exact._cache.clear()
        exact.encode(messages)  # what the teacher left in the cache
        get_minilm(dtype="bfloat16")._cache.clear()
        data.READ_BATCH = int(batch)
        recipe = load_recipe(ROOT / "recipes" / "data.toml", [f"judge.encoder_dtype={dtype}"])
        run_dir = type("RunDir", (), {"path": Path(args.scratch)})()
        judge = data.answer_reader(recipe, run_dir)
        began = time.perf_counter()
        readings = np.array(data.read_answers(judge, pairs))
        seconds = time.perf_counter() - began
        row = {"config": config, "seconds": round(seconds, 1), "pairs_per_s": round(len(pairs) / seconds, 1)}
        if first is None:
            first = readings
        else:
            row["spearman"] = round(float(spearmanr(first, readings).correlation), 5)
            row["same_best"] = round(len(best(first, args.keep) & best(readings, args.keep)) / len(best(first, args.keep)), 4)
        results.append(row)
        print(f"  {row}", file=sys.stderr, flush=True)
    return {"machine": machine(), "config": {"train": args.train, "pairs": len(pairs), "keep": args.keep, "threads": torch.get_num_threads()},
            "results": results}


def main() -> None:
    p = bench_parser(__doc__, threads=0)
    p.add_argument("--train", default="runs/data/sft_train.jsonl")
    p.add_argument("--pairs", type=int, default=0, help="the first N pairs (0: all)")
    p.add_argument("--configs", nargs="+", default=["float32/512", "bfloat16/512"],
                   help="encoder_dtype/READ_BATCH, the first the reference")
    p.add_argument("--keep", type=float, default=0.54)
    p.add_argument("--scratch", default="/tmp/emojikit-read-bench")
    args = p.parse_args()
    result = run(args)
    if print_header(result, args.json):
        return
    print(f"{'config':<16} {'seconds':>8} {'pairs/s':>8} {'spearman':>9} {'same best':>10}")
    for r in result["results"]:
        print(f"{r['config']:<16} {r['seconds']:>8} {r['pairs_per_s']:>8} {r.get('spearman', '-'):>9} {r.get('same_best', '-'):>10}")


if __name__ == "__main__":
    main()
