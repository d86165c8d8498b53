"""Repair turns in the SFT data: for training messages the data's reader misses, a two-turn chat
whose answer is the `lexicon-repair` teacher's second turn.

    python bench/repair_pairs.py --train runs/data/sft_train.jsonl --out runs/rp/train-repair.jsonl
    python bench/repair_pairs.py --pairs 3000 --out /tmp/repair.jsonl        # smoke run

The SFT data has one turn per chat, so the sender never learns what to send after a wrong guess
(its second turn repairs about as often as sending the first again). Here recipes/data.toml's
`[judge]` reads each teacher answer against every training message (the data stage's pool) and
guesses; on a miss, the `lexicon-repair` teacher answers the game's follow-up (the guess, the
message again) with emoji for the phrases the guess lacks, and the reader reads both turns with
its wrong guess excluded, as the game's judge does. The written file holds the best-read
`--single` one-turn rows and the best-read `--repair` two-turn rows, each with its `reading`,
for recipes/sft.toml with `keep_best_read = 1`. Prints the seconds, the miss share, the repair
answers' reading against sending the first turn again, and the token lengths of both kinds.
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
BATCH = 512


def run(args) -> dict:
    import torch

    from emojikit.api.components import JudgeView, Message
    from emojikit.api.format import DEFAULT_FORMAT
    from emojikit.composition.recipe import load_recipe
    from emojikit.training import data

    if args.threads:
        torch.set_num_threads(args.threads)
    rows = [json.loads(line) for line in Path(args.train).read_text(encoding="utf-8").splitlines()][: args.pairs or None]
    messages = [r["messages"][1]["content"] for r in rows]
    firsts = [r["messages"][2]["content"] for r in rows]
    recipe = load_recipe(ROOT / "recipes" / "data.toml", ["teacher.use=lexicon-repair"])
    run_dir = type("RunDir", (), {"path": Path(args.scratch)})()
    judge = data.answer_reader(recipe, run_dir)
    judge.add_candidates(messages)
    teacher = recipe.build("teacher", run_dir.path)

    began = time.perf_counter()
    guesses: list[str] = []
    for start in range(0, len(rows), BATCH):
        guesses += judge.guess([JudgeView(emoji_turns=[a]) for a in firsts[start : start + BATCH]])
    missed = [i for i, g in enumerate(guesses) if g and g != messages[i]]
    guess_seconds = time.perf_counter() - began
    print(f"  guesses: {guess_seconds:.0f} s, {len(missed)} misses of {len(rows)}", file=sys.stderr, flush=True)

    began = time.perf_counter()
    repairs: dict[int, str] = {}
    for start in range(0, len(missed), BATCH):
        chunk = missed[start : start + BATCH]
        said = teacher.repair([messages[i] for i in chunk], [guesses[i] for i in chunk], [firsts[i] for i in chunk])
        repairs.update({i: a.strip() for i, a in zip(chunk, said) if a and DEFAULT_FORMAT.check(a)})
    repair_seconds = time.perf_counter() - began

    began = time.perf_counter()
    order = sorted(repairs)
    read_repair, read_again = {}, {}
    for start in range(0, len(order), BATCH):
        chunk = order[start : start + BATCH]
        targets = [messages[i] for i in chunk]
        for kind, second in (("repair", lambda i: repairs[i]), ("again", lambda i: firsts[i])):
            views = [JudgeView(emoji_turns=[firsts[i], second(i)], guesses=[guesses[i]]) for i in chunk]
            beliefs = judge.target_logprobs(views, targets)
            (read_repair if kind == "repair" else read_again).update({i: b if b is not None else -1e9 for i, b in zip(chunk, beliefs)})
    read_seconds = time.perf_counter() - began
    print(f"  repairs: {repair_seconds:.0f} s, readings {read_seconds:.0f} s", file=sys.stderr, flush=True)

    single = sorted(range(len(rows)), key=lambda i: -rows[i]["reading"])[: args.single]
    repaired = sorted(order, key=lambda i: -read_repair[i])[: args.repair]
    follow = DEFAULT_FORMAT.follow_up
    out_rows = [rows[i] for i in sorted(single)]
    for i in sorted(repaired):
        chat = [*rows[i]["messages"][:3], {"role": "user", "content": follow.format(guess=guesses[i], target=messages[i])},
                {"role": "assistant", "content": repairs[i]}]
        out_rows.append({"messages": chat, "category": rows[i].get("category", "") + "/repair", "reading": round(read_repair[i], 4)})
    tokens = {}
    if args.tokens:
        from emojikit.support.bundled import load_tokenizer

        tok = load_tokenizer("bundled:smollm2-135m-instruct")
        for kind, chats in (("single", [rows[i]["messages"] for i in single]), ("repair", [r["messages"] for r in out_rows[len(single):]])):
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
    return {"machine": machine(), "config": {"train": args.train, "pairs": len(rows), "single": len(single), "repair": len(repaired),
            "threads": torch.get_num_threads()},
            "results": {"seconds": {"guesses": round(guess_seconds, 1), "repairs": round(repair_seconds, 1), "readings": round(read_seconds, 1)},
                        "miss_share": round(len(missed) / len(rows), 4), "repairs_given": len(order),
                        "median_reading": {"repair": round(float(np.median(rep)), 4), "first_turn_again": round(float(np.median(again)), 4)},
                        "repair_reads_better": round(float((rep > again).mean()), 4),
                        "kept_mean_reading": {"repair": round(float(kept.mean()), 4), "first_turn_again": round(float(kept_again.mean()), 4)},
                        "mean_tokens": tokens}}


def main() -> None:
    p = bench_parser(__doc__, threads=0)
    p.add_argument("--train", default="runs/data/sft_train.jsonl")
    p.add_argument("--pairs", type=int, default=0, help="the first N pairs (0: all)")
    p.add_argument("--single", type=int, default=5120, help="best-read one-turn rows to write")
    p.add_argument("--repair", type=int, default=1280, help="best-read two-turn (repair) rows to write")
    p.add_argument("--tokens", action="store_true", help="also count the chats' tokens (the bundled tokenizer)")
    p.add_argument("--out", default="", help="write the training rows here")
    p.add_argument("--scratch", default="/tmp/emojikit-bench-repair")
    args = p.parse_args()
    result = run(args)
    if not print_header(result, args.json):
        print(json.dumps(result["results"], indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
