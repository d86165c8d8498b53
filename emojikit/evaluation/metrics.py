"""Text metrics shared by the data pipeline and the evaluations."""

from __future__ import annotations

from typing import Sequence

from emojikit.api import emojis
from emojikit.api.format import DEFAULT_FORMAT, EmojiFormat


def literal_similarity(messages: Sequence[str], answers: Sequence[str | None], fmt: EmojiFormat = DEFAULT_FORMAT) -> list[float]:
    """MiniLM cosine between each message and the joined CLDR names of its answer's emoji.

    It measures how literally the emoji spell out the message. An answer that is not valid
    in `fmt` (2-8 emoji and nothing else by default) scores 0.
    """
    if len(messages) != len(answers):
        raise ValueError("literal_similarity needs one answer per message")
    valid = [i for i, a in enumerate(answers) if fmt.check(a)]
    scores = [0.0] * len(messages)
    if valid:
        from emojikit.play.embedding import get_minilm

        sims = get_minilm().pair_similarity([messages[i] for i in valid], [emojis.names_text(emojis.split(answers[i])) for i in valid])
        for i, s in zip(valid, sims):
            scores[i] = float(s)
    return scores


def distinct_per_100(answers: Sequence[str | None]) -> float:
    """Distinct emoji per 100 answers: the mean number of different emoji in each block of 100.

    Counting per fixed-size block keeps the figure comparable between splits of different
    sizes (distinct counts grow with the number of answers). Fewer than 100 answers form one
    block, scaled to 100.
    """
    answers = [a or "" for a in answers]
    if not answers:
        return 0.0
    if len(answers) < 100:
        return len({e for a in answers for e in emojis.split(a)}) * 100 / len(answers)
    blocks = [answers[i : i + 100] for i in range(0, len(answers) - len(answers) % 100, 100)]
    return sum(len({e for a in block for e in emojis.split(a)}) for block in blocks) / len(blocks)


def summarize(episodes) -> dict:
    """The game figures of a set of episodes: success rate, final similarity, turns, format
    violations, and the turns apart: first-turn success and the repair rate (turn-2 wins among
    first-turn misses, with both counts; a turn-2 win is a success in exactly two turns)."""
    n = max(len(episodes), 1)
    turns = [t for ep in episodes for t in ep.turns]
    first_turn_wins = sum(bool(ep.success) and len(ep.turns) == 1 for ep in episodes)
    misses = sum(len(ep.turns) >= 2 or (len(ep.turns) == 1 and not ep.success and not ep.failed) for ep in episodes)
    repair_wins = sum(bool(ep.success) and len(ep.turns) == 2 for ep in episodes)
    return {
        "success_rate": sum(ep.success for ep in episodes) / n,
        "similarity": sum(ep.turns[-1].similarity for ep in episodes if ep.turns) / n,
        "mean_turns": sum(len(ep.turns) for ep in episodes) / n,
        "format_violations": sum(not t.valid for t in turns) / max(len(turns), 1),
        "first_turn_success": first_turn_wins / n,
        "first_turn_similarity": sum(ep.turns[0].similarity for ep in episodes if ep.turns) / n,
        "repair_rate": repair_wins / max(misses, 1),
        "repair_wins": repair_wins,
        "first_turn_misses": misses,
    }


def specificity(messages: Sequence[str], answers: Sequence[str | None], fmt: EmojiFormat = DEFAULT_FORMAT, top: int = 20) -> dict:
    """Generic vs specific emoji, for one sender's answers to `messages`.

    generic_share: the share of all answer emoji that are among the sender's own `top` most
    frequent (a sender that answers everything with the same few emoji scores near 1);
    literal_similarity: the mean of `literal_similarity` (0 for an invalid answer);
    distinct_per_100: distinct emoji per 100 answers.
    """
    from collections import Counter

    counts = Counter(e for a in answers if a and fmt.check(a) for e in emojis.split(a))
    total = sum(counts.values())
    common = sum(c for _, c in counts.most_common(top))
    literal = literal_similarity(messages, answers, fmt)
    return {
        "generic_share": round(common / total, 4) if total else 0.0,
        "literal_similarity": round(sum(literal) / len(literal), 4) if literal else 0.0,
        "distinct_per_100": round(distinct_per_100([a if a and fmt.check(a) else "" for a in answers]), 1),
    }
