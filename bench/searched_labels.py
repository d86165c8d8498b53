"""How a teacher's answers read once a reader has searched among their emoji, under several readers.

The RFT search (`[rft] search = "subset"` with a `teacher`) proposes a teacher's emoji to the
reader RL trains against, which keeps the ones it reads (greedy forward selection by its belief
in the target). This measures that improvement operator alone, with no sender: on the training
targets of an RFT recipe (none the start's SFT trained on), the first-turn success of the
teacher's answers as they stand and of the searched answers, under the searching reader and under
readers that did not search, each with the recipe's pool (training targets + distractors).

    python bench/searched_labels.py                       # 256 targets of recipes/rft-keywords.toml
    python bench/searched_labels.py --targets 512 --readers keywords retrieval lm-reader
    python bench/searched_labels.py --min-emoji teacher   # the search keeps at least the teacher's number of emoji
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, parser as bench_parser, print_header  # noqa: E402


def first_turn_success(judge, reward, targets: list[str], answers: list) -> float:
    """Share of targets the judge picks from one answer (an answer of None loses)."""
    from emojikit.api.components import JudgeView, is_success

    played = [i for i, a in enumerate(answers) if a]
    guesses = judge.guess([JudgeView([answers[i]]) for i in played])
    similarities = reward.similarity([targets[i] for i in played], [g or "" for g in guesses])
    return sum(is_success(reward, s) for s in similarities) / len(targets)


def run(args) -> dict:
    import torch

    from emojikit.api import emojis
    from emojikit.api.components import Message, add_candidates
    from emojikit.api.format import format_of
    from emojikit.composition.assembly import build_component
    from emojikit.composition.recipe import load_recipe
    from emojikit.play.targets import split_targets
    from emojikit.stages.runs import RunDir
    from emojikit.training.rft import subset_search
    from emojikit.training.targets import sft_seen

    if args.threads:
        torch.set_num_threads(args.threads)
    work = Path(tempfile.mkdtemp(prefix="searched-labels-"))
    recipe = load_recipe(args.recipe, [f"rft.target_pool={args.targets}", f"rft.start_from={args.start}", f"seed={args.seed}"])
    heldout, train = split_targets(recipe, recipe.settings["rft"], RunDir(work / "run"), sft_seen(args.start))
    texts = [m.text for m in train]
    teacher = recipe.build_named("teacher", args.teacher, work)
    reward, decoder = recipe.build("reward", work), recipe.build("decoder", work)
    distractors = recipe.data["judge"].get("distractors", 128)
    judges = {}
    for name in dict.fromkeys([args.searcher, *args.readers]):
        judges[name] = build_component("judge", name, {"distractors": distractors}, recipe.context(work), table="judge")
        add_candidates(judges[name], [m.text for m in heldout] + texts)
    started = time.perf_counter()
    answers = teacher.answer([Message(t) for t in texts])
    teacher_seconds = time.perf_counter() - started
    started = time.perf_counter()
    floor = args.min_emoji == "teacher"  # as [rft] search_min_emoji: at least the teacher's length
    searched = subset_search(judges[args.searcher], texts, [[] if floor else [SimpleNamespace(text=a or "")] for a in answers], format_of(decoder),
                             answers if floor else None, floor_from_extra=floor)
    search_seconds = time.perf_counter() - started
    searched = [s or a for s, a in zip(searched, answers)]  # no search answer: the teacher's stands
    rows = [{"reader": name, "searched_by_it": name == args.searcher, "teacher": round(first_turn_success(j, reward, texts, answers), 3),
             "searched": round(first_turn_success(j, reward, texts, searched), 3)} for name, j in judges.items()]
    changed = sum(a != s for a, s in zip(answers, searched))
    length = lambda texts: round(statistics.fmean(len(emojis.split(t)) for t in texts if t), 2)
    return {
        "machine": machine(),
        "config": {"recipe": str(args.recipe), "start": args.start, "targets": len(texts), "pool": len(texts) + len(heldout) + distractors,
                   "teacher": args.teacher, "searcher": args.searcher, "min_emoji": args.min_emoji, "seed": args.seed},
        "rows": rows, "answers_changed": changed, "emoji_per_answer": {"teacher": length(answers), "searched": length(searched)}, "teacher_seconds": round(teacher_seconds, 2), "search_seconds": round(search_seconds, 2),
        "examples": [{"target": t, "teacher": a, "searched": s} for t, a, s in list(zip(texts, answers, searched))[: args.examples]],
    }


def main() -> None:
    parser = bench_parser(__doc__, threads=2)
    parser.add_argument("--recipe", type=Path, default=Path("recipes/rft-keywords.toml"), help="an rft recipe: its prompt source, held-out files and judge pool")
    parser.add_argument("--start", default="runs/sft-long", help="the SFT run whose training messages are left out (as the RFT run leaves them)")
    parser.add_argument("--targets", type=int, default=256)
    parser.add_argument("--teacher", default="lexicon")
    parser.add_argument("--searcher", default="keywords", help="the reader whose belief picks the emoji")
    parser.add_argument("--readers", nargs="+", default=["keywords", "retrieval"], help="readers the answers are played to (lm-reader: the third-reader extra)")
    parser.add_argument("--min-emoji", choices=["format", "teacher"], default="format",
                        help="the searched answer's floor, as [rft] search_min_emoji: the format's minimum, or the teacher's answer's length")
    parser.add_argument("--examples", type=int, default=8)
    args = parser.parse_args()
    result = run(args)
    if print_header(result, args.json):
        return
    print(f"{'reader':12s} {'teacher':>8s} {'searched':>9s}  (first-turn success)")
    for row in result["rows"]:
        print(f"{row['reader']:12s} {row['teacher']:8.3f} {row['searched']:9.3f}{'  <- searched by it' if row['searched_by_it'] else ''}")
    print(f"answers changed by the search: {result['answers_changed']} of {result['config']['targets']}; "
          f"teacher {result['teacher_seconds']} s, search {result['search_seconds']} s; emoji per answer: teacher "
          f"{result['emoji_per_answer']['teacher']}, searched {result['emoji_per_answer']['searched']}")
    for ex in result["examples"]:
        print(f"  {ex['target'][:60]:60s} {ex['teacher']} -> {ex['searched']}")


if __name__ == "__main__":
    main()
