"""Evaluations: format compliance of sampled answers (SFT) and the held-out retrieval game.

Every figure comes from samples drawn here; nothing is estimated or carried over.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Optional, Sequence

from emojikit import emojis
from emojikit.io import atomic_write_text


def answer_stats(messages: Sequence[str], answers: Sequence[str], lengths: Sequence[int], min_emoji: int = 2, max_emoji: int = 8) -> dict:
    """Format-compliance and diversity figures for answers to messages."""
    from emojikit.metrics import literal_similarity

    n = len(answers)
    parsed = [emojis.parse(a) for a in answers]
    emoji_only = [bool(found) and not rest for found, rest in parsed]
    in_range = [ok and min_emoji <= len(found) <= max_emoji for ok, (found, _) in zip(emoji_only, parsed)]
    counts = collections.Counter(len(found) if ok else -1 for ok, (found, _) in zip(emoji_only, parsed))
    used = collections.Counter(e for ok, (found, _) in zip(in_range, parsed) if ok for e in found)
    sims = literal_similarity(list(messages), list(answers))
    return {
        "n": n,
        "emoji_only_rate": sum(emoji_only) / max(n, 1),
        "in_range_rate": sum(in_range) / max(n, 1),
        "literal_similarity": float(sum(sims) / max(n, 1)),
        "count_distribution": {("invalid" if k == -1 else str(k)): v for k, v in sorted(counts.items())},
        "mean_chars": sum(len(a) for a in answers) / max(n, 1),
        "mean_tokens": sum(lengths) / max(n, 1),
        "distinct_emoji": len(used),
        "distinct_per_100": len(used) * 100 / max(n, 1),
        "top_emoji": used.most_common(20),
    }


def format_report(policy, decoder, prompts: Sequence[list[dict]], *, temperature: float = 0.7, max_tokens: int = 24, seed: int = 0) -> dict:
    """Sample one answer per prompt without the mask and, if the decoder masks, with it."""
    from emojikit.policy import SamplingParams

    params = SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=seed)
    messages = [p[-1]["content"] for p in prompts]
    min_e = getattr(decoder, "min_emoji", 2)
    max_e = getattr(decoder, "max_emoji", 8)
    report = {"prompts": len(prompts), "temperature": temperature, "max_tokens": max_tokens}
    modes = [("unmasked", None)]
    if decoder is not None and decoder.bind(getattr(policy, "tokenizer", None)) is not None:
        modes.append(("masked", decoder))
    for mode, dec in modes:
        samples = [group[0] for group in policy.sample(prompts, 1, params, dec)]
        answers = [s.text for s in samples]
        report[mode] = answer_stats(messages, answers, [len(s.tokens) for s in samples], min_e, max_e)
        report[mode]["examples"] = [{"message": m, "answer": a} for m, a in list(zip(messages, answers))[:10]]
    return report


def format_report_markdown(report: dict, title: str) -> str:
    lines = [f"# {title}", "", f"{report['prompts']} held-out prompts, temperature {report['temperature']}, max {report['max_tokens']} new tokens.", ""]
    modes = [m for m in ("unmasked", "masked") if m in report]
    lines += ["| metric | " + " | ".join(modes) + " |", "|---|" + "---|" * len(modes)]
    for key, label in [("emoji_only_rate", "emoji-only rate"), ("in_range_rate", "2-8 emoji rate"), ("literal_similarity", "literal similarity"), ("distinct_per_100", "distinct emoji / 100 answers"), ("mean_tokens", "mean response tokens"), ("mean_chars", "mean response chars")]:
        lines.append(f"| {label} | " + " | ".join(f"{report[m][key]:.3f}" for m in modes) + " |")
    for m in modes:
        lines += ["", f"## {m}", "", "count distribution: " + ", ".join(f"{k}: {v}" for k, v in report[m]["count_distribution"].items())]
        lines.append("top 20: " + " ".join(f"{e}×{c}" for e, c in report[m]["top_emoji"]))
        lines += ["", "| message | answer |", "|---|---|"]
        lines += [f"| {ex['message']} | {ex['answer']} |" for ex in report[m]["examples"]]
    return "\n".join(lines) + "\n"


def write_report(report: dict, out_dir: Path, stem: str, title: str) -> tuple[Path, Path]:
    out_dir = Path(out_dir)
    json_path, md_path = out_dir / f"{stem}.json", out_dir / f"{stem}.md"
    atomic_write_text(json_path, json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    atomic_write_text(md_path, format_report_markdown(report, title))
    return json_path, md_path
