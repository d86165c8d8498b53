"""Texts per second MiniLM embeds, the two ways two threads can share it: each thread embeds its
own batches on one torch thread (`rows`, the float32 default on two threads) or every product is
split across the threads (`ops`, sentence-transformers' own encode), alternated in one process.

    python bench/minilm_rows.py --train runs/data/sft_train.jsonl    # 8 rounds of 1024 texts of each kind
    python bench/minilm_rows.py --rounds 1 --texts 128               # smoke run

The texts are the data stage's (`[data] score_answers`, docs/data.md), from a data run's training
pairs: the messages (the readers' pool), and each teacher answer as the `retrieval` reader reads it
(CLDR names) and as the `keywords` reader does (emojilib keywords, three times as many tokens).
Each round embeds fresh texts, with the cache off, once per side, the sides' order swapped every
round; the largest difference between the two sides' embeddings is printed beside the seconds.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, parser as bench_parser, print_header, require_data  # noqa: E402

SIDES = ("rows", "ops")


def texts_of_each_kind(train: Path, count: int) -> dict[str, list[str]]:
    from emojikit_retrieval.keywords import KeywordsJudge
    from emojikit_retrieval.retrieval import RetrievalJudge

    rows = [json.loads(line) for line in train.read_text(encoding="utf-8").splitlines() if line.strip()]
    keywords = KeywordsJudge.__new__(KeywordsJudge)  # only its turn_names: no pool, no model
    keywords.max_keywords = 8
    kinds = {
        "messages": [r["messages"][1]["content"] for r in rows],
        "cldr_names": [RetrievalJudge.turn_names(r["messages"][2]["content"]) for r in rows],
        "keywords": [keywords.turn_names(r["messages"][2]["content"]) for r in rows],
    }
    return {kind: list(dict.fromkeys(t for t in texts if t))[:count] for kind, texts in kinds.items()}


def run(args) -> dict:
    import torch

    from emojikit.play.embedding import MiniLM

    torch.set_num_threads(args.threads)
    require_data(Path(args.train))
    kinds = texts_of_each_kind(Path(args.train), args.texts * (args.rounds + 1))
    encoders = {side: MiniLM(parallel=side) for side in SIDES}
    if encoders["rows"].row_workers is None:
        raise SystemExit("minilm_rows: rows need two or more torch threads (--threads)")
    seconds = {(side, kind): [] for side in SIDES for kind in kinds}
    largest_difference = 0.0
    for round_ in range(args.rounds + 1):  # round 0 warms both up and is not counted
        for kind, texts in kinds.items():
            chunk = texts[round_ * args.texts : (round_ + 1) * args.texts]
            embedded = {}
            for side in SIDES if round_ % 2 else reversed(SIDES):
                started = time.perf_counter()
                embedded[side] = encoders[side].encode(chunk, cache=False)
                if round_:
                    seconds[side, kind].append(time.perf_counter() - started)
            largest_difference = max(largest_difference, float(np.abs(embedded["rows"] - embedded["ops"]).max()))
    rows = [{"parallel": side, "texts": kind, "median_s": round(statistics.median(seconds[side, kind]), 3),
             "texts_per_s": round(args.texts / statistics.median(seconds[side, kind]), 1)} for kind in kinds for side in SIDES]
    total = {side: sum(statistics.median(seconds[side, kind]) for kind in kinds) for side in SIDES}
    return {
        "machine": machine(),
        "config": {"threads": args.threads, "rounds": args.rounds, "texts": args.texts, "train": args.train, "dtype": "float32"},
        "rows": rows,
        "ops_over_rows_median": {kind: round(statistics.median(o / r for o, r in zip(seconds["ops", kind], seconds["rows", kind])), 3) for kind in kinds},
        "ops_over_rows_all_kinds": round(total["ops"] / total["rows"], 3),
        "largest_embedding_difference": largest_difference,
    }


def main() -> None:
    parser = bench_parser(__doc__, threads=2)
    parser.add_argument("--train", default="runs/data/sft_train.jsonl", help="a data run's training pairs")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--texts", type=int, default=1024, help="texts of each kind a round")
    args = parser.parse_args()
    result = run(args)
    if print_header(result, args.json):
        return
    print(f"{'texts':<11} {'parallel':<9} {'median s':>9} {'texts/s':>9}")
    for row in result["rows"]:
        print(f"{row['texts']:<11} {row['parallel']:<9} {row['median_s']:>9.3f} {row['texts_per_s']:>9.1f}")
    for kind, ratio in result["ops_over_rows_median"].items():
        print(f"ops / rows, median over rounds, {kind}: {ratio:.3f}")
    print(f"ops / rows, the three kinds' medians summed: {result['ops_over_rows_all_kinds']:.3f}")
    print(f"largest difference between the two sides' embeddings: {result['largest_embedding_difference']:.2e}")


if __name__ == "__main__":
    main()
