"""Evaluations: format compliance of sampled answers (SFT) and the held-out retrieval game.

Every figure comes from samples drawn here; nothing is estimated or carried over.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Optional, Sequence

from pydantic import Field, field_validator

from emojikit import emojis
from emojikit.config import ConfigModel, ExistingPath
from emojikit.format import DEFAULT_FORMAT, EmojiFormat, format_of
from emojikit.io import atomic_write_text


def answer_stats(messages: Sequence[str], answers: Sequence[str], lengths: Sequence[int], fmt: EmojiFormat = DEFAULT_FORMAT) -> dict:
    """Format-compliance and diversity figures for answers to messages, against `fmt`."""
    from emojikit.metrics import literal_similarity

    n = len(answers)
    parsed = [emojis.parse(a) for a in answers]
    emoji_only = [bool(found) and not rest for found, rest in parsed]
    in_range = [ok and fmt.in_range(len(found)) for ok, (found, _) in zip(emoji_only, parsed)]
    counts = collections.Counter(len(found) if ok else -1 for ok, (found, _) in zip(emoji_only, parsed))
    used = collections.Counter(e for ok, (found, _) in zip(in_range, parsed) if ok for e in found)
    sims = literal_similarity(list(messages), list(answers), fmt)
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
    fmt = format_of(decoder)
    report = {"prompts": len(prompts), "temperature": temperature, "max_tokens": max_tokens, "emoji_range": fmt.range_text}
    modes = [("unmasked", None)]
    if decoder is not None and decoder.bind(getattr(policy, "tokenizer", None)) is not None:
        modes.append(("masked", decoder))
    for mode, dec in modes:
        samples = [group[0] for group in policy.sample(prompts, 1, params, dec)]
        answers = [s.text for s in samples]
        report[mode] = answer_stats(messages, answers, [len(s.tokens) for s in samples], fmt)
        report[mode]["examples"] = [{"message": m, "answer": a} for m, a in list(zip(messages, answers))[:10]]
    return report


def format_report_markdown(report: dict, title: str) -> str:
    lines = [f"# {title}", "", f"{report['prompts']} held-out prompts, temperature {report['temperature']}, max {report['max_tokens']} new tokens.", ""]
    modes = [m for m in ("unmasked", "masked") if m in report]
    lines += ["| metric | " + " | ".join(modes) + " |", "|---|" + "---|" * len(modes)]
    for key, label in [("emoji_only_rate", "emoji-only rate"), ("in_range_rate", f"{report.get('emoji_range', DEFAULT_FORMAT.range_text)} emoji rate"), ("literal_similarity", "literal similarity"), ("distinct_per_100", "distinct emoji / 100 answers"), ("mean_tokens", "mean response tokens"), ("mean_chars", "mean response chars")]:
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


# --- the held-out retrieval game, several checkpoints side by side ------------------------


class EvalSettings(ConfigModel):
    checkpoints: list[str] = Field(["base"], description='Checkpoint directories to compare; "base" is the start model.')
    targets_file: Optional[ExistingPath] = Field(None, description="Targets: one message per line, or JSONL with a text field. Default: the prompt source.")
    n_targets: int = Field(64, ge=1, description="Targets taken from the file or the prompt source.")
    temperature: float = Field(0.3, gt=0, description="Sender temperature.")
    unmasked: bool = Field(True, description="Also play without the decoder mask to measure format violations.")

    @field_validator("checkpoints")
    @classmethod
    def _checkpoints_exist(cls, checkpoints: list[str]) -> list[str]:
        for checkpoint in checkpoints:
            if checkpoint != "base" and not Path(checkpoint).is_dir():
                raise ValueError(f"{checkpoint} is not a checkpoint directory")
        return checkpoints


class Unmasked:
    """A decoder's validator without its mask: samples are free, violations are counted."""

    def __init__(self, decoder):
        self.decoder = decoder
        self.min_emoji, self.max_emoji = decoder.min_emoji, decoder.max_emoji

    def check(self, text):
        return self.decoder.check(text)

    def bind(self, tokenizer):
        return None


def read_targets(path: Path, limit: int):
    from emojikit.components import Message
    from emojikit.io import read_jsonl

    path = Path(path)
    if path.suffix == ".jsonl":
        rows = [Message(str(r.get("text", "")), str(r.get("category", "unknown"))) for r in read_jsonl(path)]
    else:
        rows = [Message(line.strip()) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    rows = [m for m in rows if m.text][:limit]
    if not rows:
        from emojikit.errors import InputFileError

        raise InputFileError(f"{path}: no targets")
    return rows


def game_metrics(episodes) -> dict:
    from emojikit.metrics import summarize

    used = {e for ep in episodes for t in ep.turns if t.valid for e in emojis.split(t.emoji)}
    return {**summarize(episodes), "distinct_emoji": len(used), "episodes": len(episodes)}


def evaluate_checkpoints(recipe, settings: EvalSettings, targets, out_dir: Path) -> dict:
    """Play the same targets with every checkpoint (same judge, same seed)."""
    from emojikit.game import play
    from emojikit.policy import SamplingParams

    game = recipe.settings["game"]
    decoder = recipe.build("decoder", out_dir)
    judge = recipe.build("judge", out_dir)
    reward = recipe.build("reward", out_dir)
    if hasattr(judge, "add_candidates"):
        judge.add_candidates([m.text for m in targets])
    sampling = SamplingParams(max_tokens=game.max_new_tokens, temperature=settings.temperature, seed=recipe.seed)
    results: dict = {"targets": len(targets), "seed": recipe.seed, "judge": recipe.components["judge"].spec.name, "checkpoints": {}}
    for checkpoint in settings.checkpoints:
        policy = recipe.build("backend", out_dir)
        if checkpoint != "base":
            policy.load(checkpoint, with_optimizer=False)
        episodes = play(policy, decoder, judge, reward, targets, settings=game, sampling=sampling, group_size=1)
        reward.score(episodes)
        entry = {"masked": game_metrics(episodes), "categories": {}}
        for category in sorted({m.category for m in targets}):
            entry["categories"][category] = game_metrics([ep for ep in episodes if ep.category == category])
        if settings.unmasked:
            free = play(policy, Unmasked(decoder), judge, reward, targets, settings=game, sampling=sampling, group_size=1)
            reward.score(free)
            entry["unmasked"] = game_metrics(free)
        results["checkpoints"][checkpoint] = entry
    return results


def game_markdown(results: dict) -> str:
    lines = [f"Held-out retrieval game: {results['targets']} targets, judge `{results['judge']}`, seed {results['seed']}.", ""]
    lines += ["| checkpoint | success rate | mean similarity | mean turns | format violations (masked) | format violations (unmasked) | distinct emoji |", "|---|---|---|---|---|---|---|"]
    for name, entry in results["checkpoints"].items():
        m, u = entry["masked"], entry.get("unmasked")
        free = f"{u['format_violations']:.3f}" if u else "-"
        lines.append(f"| {name} | {m['success_rate']:.3f} | {m['similarity']:.3f} | {m['mean_turns']:.2f} | {m['format_violations']:.3f} | {free} | {m['distinct_emoji']} |")
    lines += ["", "Per category (success rate / mean similarity):", ""]
    names = list(results["checkpoints"])
    categories = sorted({c for e in results["checkpoints"].values() for c in e["categories"]})
    lines += ["| category | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for c in categories:
        cells = []
        for n in names:
            m = results["checkpoints"][n]["categories"].get(c)
            cells.append(f"{m['success_rate']:.2f} / {m['similarity']:.3f}" if m else "-")
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def game_chart(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results["checkpoints"])
    metrics = [("success_rate", "success rate"), ("similarity", "mean similarity")]
    fig, axes = plt.subplots(1, len(metrics), figsize=(4 * len(metrics) + 1, 3.5))
    for ax, (key, label) in zip(axes, metrics):
        ax.bar(range(len(names)), [results["checkpoints"][n]["masked"][key] for n in names], color="#4c72b0")
        ax.set_xticks(range(len(names)), [Path(n).name if n != "base" else n for n in names], rotation=20, ha="right")
        ax.set_title(label)
        ax.set_ylim(0, 1)
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    tmp.replace(path)


def run(recipe, run_dir) -> None:
    settings: EvalSettings = recipe.settings["eval"]
    if settings.targets_file:
        targets = read_targets(settings.targets_file, settings.n_targets)
    else:
        targets = list(recipe.build("prompts", run_dir.path).messages(settings.n_targets))
    results = evaluate_checkpoints(recipe, settings, targets, run_dir.path)
    table = game_markdown(results)
    atomic_write_text(run_dir.file("eval.json"), json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    atomic_write_text(run_dir.file("eval.md"), table)
    game_chart(results, run_dir.file("eval.png"))
    print(table)
    print(f"wrote {run_dir.file('eval.json')}, eval.md and eval.png")
