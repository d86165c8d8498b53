"""Evaluations: format compliance of sampled answers (SFT) and the held-out retrieval game.

Every figure comes from samples drawn here; nothing is estimated or carried over.
"""

from __future__ import annotations

import collections
import collections.abc
import dataclasses
import json
from pathlib import Path
from typing import Optional, Sequence

from pydantic import Field, field_validator

from emojikit.api import emojis
from emojikit.api.components import add_candidates
from emojikit.api.config import ConfigModel, ExistingFile
from emojikit.api.format import DEFAULT_FORMAT, EmojiFormat, format_of
from emojikit.play.targets import read_targets
from emojikit.play.teacher_sender import TEACHER_PREFIX, TeacherSender
from emojikit.support.io import atomic_write_text, save_png


def answer_stats(messages: Sequence[str], answers: Sequence[str], lengths: Sequence[int], fmt: EmojiFormat = DEFAULT_FORMAT) -> dict:
    """Format-compliance and diversity figures for answers to messages, against `fmt`."""
    from emojikit.evaluation.metrics import literal_similarity

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
    from emojikit.api.policy import SamplingParams

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
    checkpoints: list[str] = Field(
        ["base"], description='Senders to compare: checkpoint directories, "base" (the start model), or teacher:NAME (a teacher\'s answers).'
    )
    targets_file: Optional[ExistingFile] = Field(
        None, description="Targets: JSONL with a text (and optional category) field, CSV/TSV with a text column, or one message per line."
    )
    n_targets: Optional[int] = Field(
        None, ge=1, description="Play only the first N targets (default: every target in targets_file; 128 from the prompt source)."
    )
    temperature: float = Field(0.3, gt=0, description="Sender temperature.")
    unmasked: bool = Field(True, description="Also play without the decoder mask to measure format violations.")

    @field_validator("checkpoints")
    @classmethod
    def _checkpoints_exist(cls, checkpoints: list[str]) -> list[str]:
        from emojikit.api.errors import InputFileError
        from emojikit.stages.runs import resolve_checkpoint

        try:  # a run directory means its final checkpoint
            return [resolve_checkpoint(checkpoint) for checkpoint in checkpoints]
        except InputFileError as exc:
            raise ValueError(f"{exc}; give a checkpoint or run directory, base or teacher:NAME") from None


DEFAULT_SOURCE_TARGETS = 128


class Unmasked:
    """A decoder's validator without its mask: samples are free, violations are counted."""

    def __init__(self, decoder):
        self.decoder = decoder
        self.min_emoji, self.max_emoji = decoder.min_emoji, decoder.max_emoji

    def check(self, text):
        return self.decoder.check(text)

    def bind(self, tokenizer):
        return None


def teacher_sender(recipe, name: str, game_settings, out_dir: Path) -> TeacherSender:
    """The teacher NAME with its default settings, built through the one assembly seam."""
    return TeacherSender(recipe.build_named("teacher", name, Path(out_dir)), game_settings)


def game_metrics(episodes) -> dict:
    from emojikit.evaluation.metrics import summarize

    used = {e for ep in episodes for t in ep.turns if t.valid for e in emojis.split(t.emoji)}
    return {**summarize(episodes), "distinct_emoji": len(used), "episodes": len(episodes)}


def first_turn_specificity(episodes) -> dict:
    """Generic vs specific (metrics.specificity) of the first-turn answers: the sender's own
    reading of each message, before any guess steers it."""
    from emojikit.evaluation.metrics import specificity

    played = [ep for ep in episodes if ep.turns]
    return specificity([ep.target for ep in played], [ep.turns[0].emoji for ep in played])


class ReplayingSender:
    """A sender that answers a seeded sample call it has answered before from memory. Seeded
    sampling is deterministic, and a game's first turn (its prompts, its seed) is the same under
    every reader: a caller that plays the same targets under several readers samples it once."""

    def __init__(self, policy):
        self.policy = policy
        self._answers: dict = {}

    def sample(self, prompts, n, params, decoder=None):
        if params.seed is None or not isinstance(decoder, collections.abc.Hashable):
            return self.policy.sample(prompts, n, params, decoder)
        # The decoder itself in the key (not its id): it stays alive, so no later decoder takes its id.
        key = (json.dumps(prompts, sort_keys=True, ensure_ascii=False), n, dataclasses.astuple(params), decoder)
        if key not in self._answers:
            self._answers[key] = self.policy.sample(prompts, n, params, decoder)
        return [list(group) for group in self._answers[key]]

    def __getattr__(self, name):
        return getattr(self.policy, name)


class LoadedSenders:
    """What evaluate_checkpoints keeps between calls that play the same senders again (the
    comparison plays every set under every reader): the decoder, and each checkpoint loaded once,
    its seeded answers replayed (ReplayingSender). `drop` frees a sender no later call plays."""

    def __init__(self):
        self.decoder = None
        self.senders: dict = {}

    def drop(self, checkpoint: str) -> None:
        self.senders.pop(checkpoint, None)


def load_sender(recipe, checkpoint: str, game, out_dir: Path):
    """What plays `checkpoint`: a teacher (teacher:NAME), the base model, or a saved checkpoint."""
    if checkpoint.startswith(TEACHER_PREFIX):
        return teacher_sender(recipe, checkpoint[len(TEACHER_PREFIX):], game, out_dir)
    if checkpoint == "base":
        return recipe.build("backend", out_dir)
    sender = recipe.build_player(out_dir)
    sender.load(checkpoint, with_optimizer=False)
    return sender


def evaluate_checkpoints(recipe, settings: EvalSettings, targets, out_dir: Path, *, progress: bool = True, pool: Sequence[str] = (),
                         senders: Optional[LoadedSenders] = None) -> dict:
    """Play the same targets with every sender (same judge, same seed), with a progress bar
    over finished episodes. `pool`: more candidates for a pool judge besides the targets (the
    rest of a set of which only the first rows are played). `senders`: keep the loaded senders
    for later calls (LoadedSenders); without it each is loaded here and let go after its games."""
    from tqdm import tqdm

    from emojikit.play.game import count_finished, episode_to_json, play
    from emojikit.api.policy import SamplingParams

    game = recipe.settings["game"]
    if senders is not None and senders.decoder is None:
        senders.decoder = recipe.build("decoder", out_dir)
    decoder = senders.decoder if senders is not None else recipe.build("decoder", out_dir)
    judge = recipe.build("judge", out_dir)
    reward = recipe.build("reward", out_dir)
    add_candidates(judge, [m.text for m in targets] + list(pool))  # the judge ignores duplicates
    sampling = SamplingParams(max_tokens=game.max_new_tokens, temperature=settings.temperature, seed=recipe.seed)
    results: dict = {"targets": len(targets), "seed": recipe.seed, "judge": recipe.components["judge"].spec.name,
                     "max_turns": game.max_turns, "temperature": settings.temperature, "checkpoints": {}}
    plays = len(settings.checkpoints) * (2 if settings.unmasked else 1)
    bar = tqdm(total=plays * len(targets), desc="eval", unit="episode", disable=not progress)

    def play_all(sender, dec):
        return play(sender, dec, judge, reward, targets, settings=game, sampling=sampling, group_size=1, on_turn=count_finished(bar, game.max_turns))

    try:
        for checkpoint in settings.checkpoints:
            bar.set_postfix_str(Path(checkpoint).name if "/" in checkpoint else checkpoint)
            if senders is None:
                sender = load_sender(recipe, checkpoint, game, out_dir)
            elif checkpoint in senders.senders:
                sender = senders.senders[checkpoint]
            else:
                sender = senders.senders[checkpoint] = ReplayingSender(load_sender(recipe, checkpoint, game, out_dir))
            episodes = play_all(sender, decoder)
            entry = {"masked": game_metrics(episodes), "categories": {}}
            entry["masked"].update(first_turn_specificity(episodes))
            for category in sorted({m.category for m in targets}):
                entry["categories"][category] = game_metrics([ep for ep in episodes if ep.category == category])
            if settings.unmasked:
                entry["unmasked"] = game_metrics(play_all(sender, Unmasked(decoder)))
            entry["per_target_success"] = [bool(ep.success) for ep in episodes]
            entry["per_target_similarity"] = [round(ep.turns[-1].similarity if ep.turns else 0.0, 4) for ep in episodes]
            entry["per_target"] = [episode_to_json(ep) for ep in episodes]  # every turn: emoji, guess, similarity
            results["checkpoints"][checkpoint] = entry
    finally:
        bar.close()
    return results


def game_markdown(results: dict) -> str:
    turns = f", up to {results['max_turns']} turns" if "max_turns" in results else ""
    lines = [f"Held-out retrieval game: {results['targets']} targets, judge `{results['judge']}`, seed {results['seed']}{turns}.", ""]
    lines += ["| checkpoint | success rate | first-turn success | repair rate (turn-2 wins / first-turn misses) | mean similarity | mean turns | format violations (masked) | format violations (unmasked) | distinct emoji |", "|---|---|---|---|---|---|---|---|---|"]
    for name, entry in results["checkpoints"].items():
        m, u = entry["masked"], entry.get("unmasked")
        free = f"{u['format_violations']:.3f}" if u else "-"
        repair = f"{m['repair_rate']:.3f} ({m['repair_wins']}/{m['first_turn_misses']})" if "repair_rate" in m else "-"
        lines.append(f"| {name} | {m['success_rate']:.3f} | {m.get('first_turn_success', float('nan')):.3f} | {repair} | {m['similarity']:.3f} | {m['mean_turns']:.2f} | {m['format_violations']:.3f} | {free} | {m['distinct_emoji']} |")
    lines += ["", "Generic vs specific, first-turn answers (generic share: share of emoji among the sender's 20 most frequent; literal similarity: MiniLM of the message against the emoji's names):", "",
              "| checkpoint | generic share | literal similarity | distinct emoji per 100 answers |", "|---|---|---|---|"]
    for name, entry in results["checkpoints"].items():
        m = entry["masked"]
        if "generic_share" in m:
            lines.append(f"| {name} | {m['generic_share']:.3f} | {m['literal_similarity']:.3f} | {m['distinct_per_100']:.1f} |")
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
    save_png(fig, path)
    plt.close(fig)


def eval_targets(recipe, settings: EvalSettings, out_dir: Path):
    if settings.targets_file:
        return read_targets(settings.targets_file, settings.n_targets)
    return list(recipe.build("prompts", out_dir).messages(settings.n_targets or DEFAULT_SOURCE_TARGETS))


def run(recipe, run_dir, senders: Optional[LoadedSenders] = None) -> dict:
    settings: EvalSettings = recipe.settings["eval"]
    targets = eval_targets(recipe, settings, run_dir.path)
    results = evaluate_checkpoints(recipe, settings, targets, run_dir.path, senders=senders)
    table = game_markdown(results)
    atomic_write_text(run_dir.file("eval.json"), json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    atomic_write_text(run_dir.file("eval.md"), table)
    game_chart(results, run_dir.file("eval.png"))
    print(table)
    print(f"wrote {run_dir.file('eval.json')}, eval.md and eval.png")
    return results


def readers_markdown(reports: dict[str, dict]) -> str:
    """Every sender under every reader (`eval` with several judges): success, first-turn success
    in brackets, one column per reader."""
    first = next(iter(reports.values()))
    turns = f", up to {first['max_turns']} turns" if "max_turns" in first else ""
    lines = [f"The same {first['targets']} targets under each reader, seed {first['seed']}{turns}: success (first-turn success).", ""]
    lines += ["| checkpoint | " + " | ".join(f"`{judge}`" for judge in reports) + " |", "|---|" + "---|" * len(reports)]
    for name in first["checkpoints"]:
        cells = [report["checkpoints"][name]["masked"] for report in reports.values()]
        lines.append(f"| {name} | " + " | ".join(f"{m['success_rate']:.3f} ({m.get('first_turn_success', float('nan')):.3f})" for m in cells) + " |")
    return "\n".join(lines) + "\n"


def preflight(recipe) -> None:
    """What run() would reject, before a run directory is made: a targets file that cannot be
    read (not UTF-8, a huge line, no targets: file:line) and a token budget too small for the
    decoder's shortest answer."""
    from emojikit.api.errors import ConfigError
    from emojikit.composition.preflight import token_budget_problem

    settings = recipe.settings["eval"]
    if settings.targets_file is not None:
        read_targets(settings.targets_file, settings.n_targets)
    problem = token_budget_problem(recipe, recipe.settings["game"].max_new_tokens, "[game] max_new_tokens")
    if problem:
        raise ConfigError(f"{recipe.path}: {problem}")
