"""Repair turns in the SFT data, from a data run's training pairs: `[data] repair_turns` on data
already made, with figures.

    python bench/repair_pairs.py --train runs/data/sft_train.jsonl --out runs/rp/train-repair.jsonl
    python bench/repair_pairs.py --pairs 3000 --out /tmp/repair.jsonl        # smoke run

The SFT data has one turn per chat, so the sender never learns what to send after a wrong guess
(its second turn repairs about as often as sending the first again). recipes/data.toml's `[judge]`
reads each teacher answer against every training message (the data stage's pool) and guesses; on
a miss the `lexicon-repair` teacher answers the game's follow-up (the guess, the message again)
with emoji for the phrases the guess lacks, and the judge reads both turns with its wrong guess
excluded (`emojikit.training.data.repair_turns`, as the data stage does). The written file is the
input's rows and a row marked "repair" per miss, for recipes/sft.toml's `repair_share`. Prints the
seconds, the share of pairs repaired, the repairs' reading against sending the first turn again
(among all and among the best-read that `--keep` and `--repair-share` keep), and the token lengths
of the kept one-turn and repair chats.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, parser as bench_parser, print_header  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BATCH = 512


def data_beliefs(judge, views: list[tuple[str, list[str], str]]) -> list[float]:
    """The judge's log-belief in each message from its emoji turns, its wrong guess excluded."""
    from emojikit.api.components import JudgeView

    out: list[float] = []
    for start in range(0, len(views), BATCH):
        chunk = views[start : start + BATCH]
        beliefs = judge.target_logprobs([JudgeView(emoji_turns=turns, guesses=[guess]) for _, turns, guess in chunk], [m for m, _, _ in chunk])
        out += [b if b is not None else -1e9 for b in beliefs]
    return out


def run(args) -> dict:
    import torch

    from emojikit.api.components import Message
    from emojikit.composition.recipe import load_recipe
    from emojikit.training import data

    if args.threads:
        torch.set_num_threads(args.threads)
    rows = [json.loads(line) for line in Path(args.train).read_text(encoding="utf-8").splitlines()]
    rows = [r for r in rows if r.get("repair") is not True][: args.pairs or None]  # the one-turn pairs (a run with repair_turns has both)
    messages = [r["messages"][1]["content"] for r in rows]
    firsts = [r["messages"][2]["content"] for r in rows]
    recipe = load_recipe(ROOT / "recipes" / "data.toml", ["teacher.use=lexicon-repair"])
    run_dir = type("RunDir", (), {"path": Path(args.scratch)})()
    judge = data.answer_reader(recipe, run_dir)
    judge.add_candidates(messages)
    teacher = recipe.build("teacher", run_dir.path)

    began = time.perf_counter()
    made, _ = data.repair_turns(judge, teacher, list(zip([Message(m) for m in messages], firsts)), [r["reading"] for r in rows])
    seconds = time.perf_counter() - began
    index = {m: i for i, m in enumerate(messages)}
    guesses = {index[m.text]: g for m, _, g, _, _ in made}
    repairs = {index[m.text]: r for m, _, _, r, _ in made}
    read_repair = {index[m.text]: b for m, _, _, _, b in made}
    order = sorted(repairs)
    # The same turn sent again, read as the repair is: what a repair must beat.
    read_again = dict(zip(order, data_beliefs(judge, [(messages[i], [firsts[i], firsts[i]], guesses[i]) for i in order])))
    print(f"  repair turns: {seconds:.0f} s, {len(order)} of {len(rows)} pairs missed", file=sys.stderr, flush=True)

    # What recipes/sft.toml trains on: keep_best_read's share of the one-turn rows, repair_share of it the best-read repairs.
    total = math.ceil(args.keep * len(rows))
    repaired = sorted(order, key=lambda i: -read_repair[i])[: round(args.repair_share * total)]
    out_rows = rows + [data.repair_row(rows[i]["messages"][0]["content"], Message(m.text, rows[i].get("category", "")), a, g, r, b)
                       for m, a, g, r, b in made for i in [index[m.text]]]
    tokens = {}
    if args.tokens:
        from emojikit.support.bundled import load_tokenizer

        tok = load_tokenizer("bundled:smollm2-135m-instruct")
        single = sorted(range(len(rows)), key=lambda i: -rows[i]["reading"])[: total - len(repaired)]
        two_turn = {index[r["messages"][1]["content"]]: r for r in out_rows[len(rows):]}
        for kind, chats in (("single", [rows[i]["messages"] for i in single]), ("repair", [two_turn[i]["messages"] for i in repaired])):
            lengths = [len(tok(tok.apply_chat_template(c, tokenize=False))["input_ids"]) for c in chats[:2000]]
            tokens[kind] = round(float(np.mean(lengths)), 1) if lengths else 0.0
    if args.out:
        from emojikit.support.io import atomic_write_jsonl

        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_jsonl(Path(args.out), out_rows)
    rep = np.array([read_repair[i] for i in order])
    again = np.array([read_again[i] for i in order])
    kept = np.array([read_repair[i] for i in repaired])
    kept_again = np.array([read_again[i] for i in repaired])
    return {"machine": machine(), "config": {"train": args.train, "pairs": len(rows), "keep": args.keep, "repair_share": args.repair_share,
            "threads": torch.get_num_threads()},
            "results": {"seconds": round(seconds, 1), "repaired_share": round(len(order) / len(rows), 4),
                        "median_reading": {"repair": round(float(np.median(rep)), 4), "first_turn_again": round(float(np.median(again)), 4)},
                        "repair_reads_better": round(float((rep > again).mean()), 4),
                        "kept_mean_reading": {"repair": round(float(kept.mean()), 4), "first_turn_again": round(float(kept_again.mean()), 4)},
                        "mean_tokens": tokens}}


def main() -> None:
    p = bench_parser(__doc__, threads=0)
    p.add_argument("--train", default="runs/data/sft_train.jsonl")
    p.add_argument("--pairs", type=int, default=0, help="the first N pairs (0: all)")
    p.add_argument("--keep", type=float, default=0.27, help="recipes/sft.toml's keep_best_read (for the kept rows' figures)")
    p.add_argument("--repair-share", type=float, default=0.15, help="[sft] repair_share (for the kept rows' figures)")
    p.add_argument("--tokens", action="store_true", help="also count the chats' tokens (the bundled tokenizer)")
    p.add_argument("--out", default="", help="write the training rows here")
    p.add_argument("--scratch", default="/tmp/emojikit-bench-repair")
    args = p.parse_args()
    result = run(args)
    if not print_header(result, args.json):
        print(json.dumps(result["results"], indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
