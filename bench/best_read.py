"""The best-read training pairs, and a control with their mix of sources (docs/experiments/learning-per-minute.md).

Reads every SFT training pair's teacher answer with each named reader (one turn, the pool: every
training message), ranks the pairs by the sum of the readers' log-beliefs in their own message,
and writes two training files of N pairs: the best-read N, and a random N with exactly the best-read
N's count from each category (what the mix of sources alone does). Prints the share of pairs each
reader puts first and, per category, the share kept. Where `[data] score_answers` wrote a
`reading` into each row, `--compare-rows` also prints how many of the N best by that reading are
among the N chosen here.

    python bench/best_read.py --train runs/data/sft_train.jsonl --keep 12800 --out runs/sel
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins"))

from emojikit.api.components import JudgeView  # noqa: E402

BATCH = 1000


def reader(name: str, pool: list[str]):
    from emojikit_retrieval.keywords import KeywordsJudge
    from emojikit_retrieval.retrieval import RetrievalJudge

    return {"retrieval": RetrievalJudge, "keywords": KeywordsJudge}[name](pool)


def readings(name: str, messages: list[str], answers: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(each pair's log-belief in its message, its message's rank among all) under one reader."""
    judge = reader(name, messages)
    beliefs, ranks = [], []
    for start in range(0, len(messages), BATCH):
        views = [JudgeView(emoji_turns=[a]) for a in answers[start : start + BATCH]]
        targets = messages[start : start + BATCH]
        scores, _ = judge._scores(views)
        true = scores[np.arange(len(views)), [judge._index[m] for m in targets]]
        ranks.extend((scores > true[:, None]).sum(axis=1))
        beliefs.extend(judge.target_logprobs(views, targets))
    return np.array(beliefs, dtype=np.float64), np.array(ranks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=Path, default=ROOT / "runs/data/sft_train.jsonl")
    parser.add_argument("--keep", type=int, default=12_800, help="pairs in each written file")
    parser.add_argument("--readers", nargs="+", default=["retrieval", "keywords"])
    parser.add_argument("--out", type=Path, default=ROOT / "runs/sel")
    parser.add_argument("--limit", type=int, default=None, help="the first N pairs only (a smoke run)")
    parser.add_argument("--seed", type=int, default=7, help="the control's draw")
    parser.add_argument("--compare-rows", action="store_true", help="overlap with the N best by the rows' own `reading`")
    args = parser.parse_args()

    lines = args.train.read_text(encoding="utf-8").splitlines()[: args.limit]
    rows = [json.loads(line) for line in lines]
    messages = [r["messages"][1]["content"].strip() for r in rows]
    answers = [r["messages"][2]["content"] for r in rows]
    categories = [r.get("category", "") for r in rows]
    keep = min(args.keep, len(rows))

    total = np.zeros(len(rows))
    for name in args.readers:
        started = time.monotonic()
        beliefs, ranks = readings(name, messages, answers)
        total += beliefs
        print(f"{name}: message first for {np.mean(ranks == 0):.3f} of {len(rows)} pairs, median rank {np.median(ranks):.0f} ({time.monotonic() - started:.0f} s)")
    best = sorted(np.argsort(-total, kind="stable")[:keep].tolist())

    wanted = Counter(categories[i] for i in best)
    by_category = defaultdict(list)
    for i, c in enumerate(categories):
        by_category[c].append(i)
    rng = random.Random(args.seed)
    control = sorted(i for c, n in wanted.items() for i in rng.sample(by_category[c], n))

    args.out.mkdir(parents=True, exist_ok=True)
    for name, picked in ((f"train-top{keep}.jsonl", best), (f"train-mix{keep}.jsonl", control)):
        (args.out / name).write_text("".join(lines[i] + "\n" for i in picked), encoding="utf-8")
        print(f"wrote {args.out / name}: {len(picked)} pairs")
    counts = Counter(categories)
    print("| category | pairs | kept |\n|---|---|---|")
    for c, n in counts.most_common():
        print(f"| {c} | {n} | {wanted[c] / n:.2f} |")
    if args.compare_rows:
        by_row = sorted(range(len(rows)), key=lambda i: -rows[i]["reading"])[:keep]
        print(f"the rows' own readings: {len(set(by_row) & set(best))} of the {keep} best are the same pairs")


if __name__ == "__main__":
    main()
