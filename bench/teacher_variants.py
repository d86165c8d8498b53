"""Several teacher answers per message: the lexicon teacher answers every training message once per
setting, recipes/data.toml's `[judge]` reads every answer, and each message keeps its best-read one.

    python bench/teacher_variants.py --train runs/data/sft_train.jsonl --out runs/v/train-variants.jsonl
    python bench/teacher_variants.py --pairs 3000 --out /tmp/variants.jsonl       # smoke run

The pool is every training message, as in the data stage (`[data] score_answers`), so a reading is
the same log-belief the data stage writes (its rows' own answers and readings stand for the
default setting's, which are the same), and the written file (the input's rows, each with its
message's best-read answer and that `reading`) trains with recipes/sft.toml's `keep_best_read` as
it is. Prints, per setting, its seconds (labelling and reading), the median reading, the answers'
length in emoji, and how often its answer is a message's best-read, among all messages and among
the best-read share that recipes/sft.toml keeps; then that share's mean reading and length with
one answer per message and with the best of several. `[data] teacher_variants` does the same
inside the data stage.
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
# The teacher's settings that change its answers most (a probe of 3,800 messages): more weight on
# the whole message or on relevance makes longer answers the readers decode better; fewer, surer emoji.
VARIANTS = {
    "default": {},
    "message_weight=0.8": {"message_weight": 0.8},
    "mmr_lambda=0.9": {"mmr_lambda": 0.9},
    "min_relevance=0.3": {"min_relevance": 0.3},
}


def run(args) -> dict:
    import torch

    from emojikit.api import emojis
    from emojikit.api.components import Message
    from emojikit.api.format import DEFAULT_FORMAT
    from emojikit.composition.recipe import load_recipe
    from emojikit.training import data

    if args.threads:
        torch.set_num_threads(args.threads)
    rows = [json.loads(line) for line in Path(args.train).read_text(encoding="utf-8").splitlines()][: args.pairs or None]
    messages = [Message(r["messages"][1]["content"]) for r in rows]
    recipe = load_recipe(ROOT / "recipes" / "data.toml", [])
    run_dir = type("RunDir", (), {"path": Path(args.scratch)})()
    judge = data.answer_reader(recipe, run_dir)
    # Each setting's teacher through the data stage's own seam: [teacher] with that table over it.
    settings = recipe.settings["data"].model_copy(update={"teacher_variants": [VARIANTS[name] for name in args.variants]})
    answers, readings, seconds = {}, {}, {}
    for number, name in enumerate(args.variants, start=1):
        began = time.perf_counter()
        if name == "default" and not args.pairs and all("reading" in r for r in rows):
            # The data stage wrote the default answers and their readings, by the same panel and pool (all the rows).
            answers[name] = [r["messages"][2]["content"] for r in rows]
            readings[name], seconds[name] = np.array([r["reading"] for r in rows]), 0.0
            continue
        teacher = data.variant_choice(recipe, settings, number).build(recipe.context(run_dir.path))
        said = [a.strip() if a and DEFAULT_FORMAT.check(a) else None for a in teacher.answer(messages)]  # checked as the data stage checks
        # An answer the teacher could not give reads worst: the message keeps another setting's.
        pairs = [(m, a or "") for m, a in zip(messages, said)]
        read = np.array(data.read_answers(judge, pairs))
        read[[a is None for a in said]] = -1e9
        answers[name], readings[name], seconds[name] = said, read, time.perf_counter() - began
        print(f"  {name}: {seconds[name]:.0f} s, median reading {np.median(read):.3f}", file=sys.stderr, flush=True)
    names = list(args.variants)
    read_V_M = np.stack([readings[n] for n in names])
    best_M = read_V_M.argmax(axis=0)  # ties: the first setting, the default
    best_read_M = read_V_M.max(axis=0)
    kept = np.argsort(-best_read_M, kind="stable")[: round(args.keep * len(messages))]
    kept_default = np.argsort(-readings[names[0]], kind="stable")[: len(kept)]
    results = []
    for v, name in enumerate(names):
        said = answers[name]
        results.append({
            "variant": name, "seconds": round(seconds[name], 1), "median_reading": round(float(np.median(readings[name])), 4),
            "mean_emoji": round(float(np.mean([emojis.count(a) for a in said if a])), 2),
            "best_share": round(float((best_M == v).mean()), 4), "best_share_kept": round(float((best_M[kept] == v).mean()), 4),
        })
    chosen = [answers[names[v]][i] for i, v in enumerate(best_M)]
    summary = {
        "median_reading": {"default": round(float(np.median(readings[names[0]])), 4), "best": round(float(np.median(best_read_M)), 4)},
        "kept_mean_reading": {"default": round(float(readings[names[0]][kept_default].mean()), 4), "best": round(float(best_read_M[kept].mean()), 4)},
        "kept_mean_emoji": {"default": round(float(np.mean([emojis.count(answers[names[0]][i]) for i in kept_default])), 2),
                            "best": round(float(np.mean([emojis.count(chosen[i]) for i in kept])), 2)},
        "kept_same_messages": round(len(set(kept.tolist()) & set(kept_default.tolist())) / len(kept), 4),
    }
    if args.out:
        from emojikit.support.io import atomic_write_jsonl

        out_rows = []
        for i, row in enumerate(rows):
            if chosen[i] is None:
                continue
            row = json.loads(json.dumps(row))
            row["messages"][2]["content"] = chosen[i]
            row["reading"] = round(float(best_read_M[i]), 4)
            out_rows.append(row)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_jsonl(Path(args.out), out_rows)
    return {"machine": machine(), "config": {"train": args.train, "pairs": len(messages), "keep": args.keep, "variants": names,
            "threads": torch.get_num_threads()}, "results": results, "summary": summary}


def main() -> None:
    p = bench_parser(__doc__, threads=0)
    p.add_argument("--train", default="runs/data/sft_train.jsonl")
    p.add_argument("--pairs", type=int, default=0, help="the first N pairs (0: all)")
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS), help="teacher settings, the first the reference")
    p.add_argument("--keep", type=float, default=0.27, help="the best-read share recipes/sft.toml keeps")
    p.add_argument("--out", default="", help="write the rows with each message's best-read answer here")
    p.add_argument("--scratch", default="/tmp/emojikit-bench-variants")
    args = p.parse_args()
    result = run(args)
    if print_header(result, args.json):
        return
    print(f"{'setting':20s} {'seconds':>8s} {'median reading':>15s} {'emoji':>6s} {'best-read':>10s} {'of the kept':>12s}")
    for row in result["results"]:
        print(f"{row['variant']:20s} {row['seconds']:8.0f} {row['median_reading']:15.3f} {row['mean_emoji']:6.2f} {row['best_share']:10.3f} {row['best_share_kept']:12.3f}")
    for key, value in result["summary"].items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
