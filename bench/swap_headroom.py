"""How much a reader's own way of reading emoji offers beyond the teacher's answers, and how much of it carries to new messages.

RL against a reader can only teach what that reader rewards and imitation did not already give. This measures the
room for it on the teacher's own answers, one emoji swap at a time. Each swap replaces one emoji of an answer by
one of its nearest emoji by CLDR name (MiniLM).

- **headroom per message**: the share of the first-turn misses that some single swap turns into a win. This is what a
  search per message (RL on messages it plays again) can find.
- **what carries**: swap rules (emoji a -> emoji b) learned on half A of the messages, the ones that win more messages
  than they lose there. They are applied to every answer of half B, and the result is scored on B: a gain that carries
  to new messages is what RL would have to learn.

The same rules are read by the other readers too (--other): a pun on one reader loses under the others.

    python bench/swap_headroom.py --targets recipes/targets/real-texts.jsonl --reader keywords --other retrieval
    python bench/swap_headroom.py --reader lm-reader --other retrieval --other keywords   # the third reader's room
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins"))

from emojikit import BuildContext, JudgeView, build_component, emojis  # noqa: E402
from emojikit.api.components import add_candidates  # noqa: E402
from emojikit.play.embedding import get_minilm  # noqa: E402
from emojikit.play.targets import read_targets  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from common import machine  # noqa: E402


def first_turn_wins(judge, answers: list[str], texts: list[str], chunk: int = 2048) -> np.ndarray:
    # In chunks: the judge scores every view against its whole pool at once (views x pool floats).
    guesses = [g for start in range(0, len(answers), chunk) for g in judge.guess([JudgeView(emoji_turns=[a]) for a in answers[start : start + chunk]])]
    return np.array([g == t for g, t in zip(guesses, texts)])


def neighbours(inventory: list[str], used: set[str], k: int) -> dict[str, list[str]]:
    """The k emoji whose CLDR names are nearest each used emoji's (MiniLM cosine)."""
    model = get_minilm()
    vectors = np.asarray(model.encode([emojis.name(e) for e in inventory]))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index = {e: i for i, e in enumerate(inventory)}
    out = {}
    for e in used:
        if e not in index:
            continue
        scores = vectors @ vectors[index[e]]
        scores[index[e]] = -1.0
        out[e] = [inventory[i] for i in np.argsort(-scores)[:k]]
    return out


def swaps(answer: str, near: dict[str, list[str]]):
    """(rule, swapped answer) for every single swap of one emoji by a neighbour."""
    seqs = emojis.split(answer)
    for j, e in enumerate(seqs):
        for n in near.get(e, []):
            if n not in seqs:
                yield (e, n), "".join(seqs[:j] + [n] + seqs[j + 1 :])


def apply_rules(answer: str, rules: dict[str, str]) -> str:
    seqs = emojis.split(answer)
    out = [rules.get(e, e) for e in seqs]
    return "".join(out) if len(set(out)) == len(out) else answer  # a rule that repeats an emoji is not applied


def learn_rules(judge, texts: list[str], answers: list[str], near: dict, min_net: int) -> tuple[dict[str, str], set[int]]:
    """Swap rules that win at least `min_net` more of these messages than they lose (one per emoji,
    its best), and the messages some single swap turns from a miss into a win."""
    base = first_turn_wins(judge, answers, texts)
    candidates = [(i, rule, swapped) for i, a in enumerate(answers) for rule, swapped in swaps(a, near)]
    wins = first_turn_wins(judge, [s for _, _, s in candidates], [texts[i] for i, _, _ in candidates])
    fixable, net = set(), defaultdict(int)
    for (i, rule, _), won in zip(candidates, wins):
        if won and not base[i]:
            fixable.add(i)
        if won != base[i]:
            net[rule] += 1 if won else -1
    rules: dict[str, str] = {}
    for (a, b), score in sorted(net.items(), key=lambda kv: -kv[1]):
        if score >= min_net and a not in rules:
            rules[a] = b
    return rules, fixable


def reader(name: str, texts: list[str], seed: int):
    judge = build_component("judge", name, {}, BuildContext(seed=seed))  # 256 generated distractors, as `emojikit eval` plays
    add_candidates(judge, texts)  # every message in the pool
    return judge


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", type=Path, default=ROOT / "recipes/targets/real-texts.jsonl")
    parser.add_argument("--reader", default="keywords")
    parser.add_argument("--other", action="append", default=None,
                        help="A reader the rules are also read by (repeatable; default: retrieval).")
    parser.add_argument("--neighbours", type=int, default=8)
    parser.add_argument("--min-net", type=int, default=2, help="A rule is kept when it wins this many more messages than it loses where it is learned.")
    parser.add_argument("--learn-from", type=Path, default=None,
                        help="Learn the rules on these SFT chats (runs/data/sft_train.jsonl: message and teacher answer) instead of "
                        "half A of the targets; every target is then a new message.")
    parser.add_argument("--learn-n", type=int, default=3000, help="The first N chats of --learn-from.")
    parser.add_argument("--seed", type=int, default=1, help="The pool's distractors: recipes/eval.toml's seed.")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    start = time.perf_counter()

    messages = read_targets(args.targets)
    texts = [m.text for m in messages]
    teacher = build_component("teacher", "lexicon", {}, BuildContext(seed=args.seed))
    answers = [a or "" for a in teacher.answer(messages)]
    others = args.other or ["retrieval"]
    readers = {name: reader(name, texts, args.seed) for name in dict.fromkeys([args.reader, *others])}
    if args.learn_from is not None:
        rows = [json.loads(line) for line in args.learn_from.read_text(encoding="utf-8").splitlines()[: args.learn_n]]
        learn_texts = [r["messages"][1]["content"] for r in rows]
        learn_answers = [r["messages"][2]["content"] for r in rows]
        learn_judge = reader(args.reader, learn_texts, args.seed)
        if hasattr(learn_judge, "_meanings"):  # lm-reader: the model names each emoji once for both pools
            learn_judge._meanings = readers[args.reader]._meanings
        learned_on, new = f"{len(learn_texts)} chats of {args.learn_from}", list(range(len(texts)))
    else:
        half = len(texts) // 2
        learn_texts, learn_answers, learn_judge = texts[:half], answers[:half], None
        learned_on, new = "half A of the targets", list(range(half, len(texts)))

    used = {e for a in answers + learn_answers for e in emojis.split(a)}
    near = neighbours(list(emojis.inventory(exclude_flags=True, exclude_skin_tones=True)), used, args.neighbours)
    if learn_judge is None:  # half A in the targets' own pool
        rules, _ = learn_rules(readers[args.reader], learn_texts, learn_answers, near, args.min_net)
    else:
        rules, _ = learn_rules(learn_judge, learn_texts, learn_answers, near, args.min_net)
    _, fixable = learn_rules(readers[args.reader], texts, answers, near, args.min_net)
    swapped = [apply_rules(a, rules) for a in answers]
    result = {"machine": machine(), "targets": len(texts), "reader": args.reader, "other": others, "rules learned on": learned_on,
              "rules": len(rules), "rules_sample": [f"{a}->{b}" for a, b in list(rules.items())[:12]],
              "answers the rules change (new messages)": sum(swapped[i] != answers[i] for i in new)}
    for name, judge in readers.items():
        before = first_turn_wins(judge, answers, texts)
        after = first_turn_wins(judge, swapped, texts)
        gained, lost = int(np.sum(after[new] & ~before[new])), int(np.sum(before[new] & ~after[new]))
        result[f"{name}, new messages ({len(new)})"] = {"teacher": round(float(before[new].mean()), 3),
                                                       "with the rules": round(float(after[new].mean()), 3), "gained": gained, "lost": lost}
        if name == args.reader:
            misses = [i for i in new if not before[i]]
            result["headroom: misses of the new messages one swap fixes"] = f"{sum(i in fixable for i in misses)} of {len(misses)}"
            result["headroom: first-turn success with the best swap per message"] = round(float(np.mean([before[i] or i in fixable for i in new])), 3)
    result["seconds"] = round(time.perf_counter() - start, 1)
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
        return
    for key, value in result.items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
