"""The end of the main job: the held-out game for the base model, the GRPO start checkpoint
(SFT), the final GRPO checkpoint and the teacher, side by side (same targets, judge and seed).

It is `emojikit eval` with the GRPO recipe's components and held-out targets, written into the
GRPO run directory as comparison.json, comparison.md and comparison.png.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Optional

from emojikit.support.io import atomic_write_text

STEM = "comparison"
TEACHER = "lexicon"  # the offline teacher that made the SFT data: the reference row


def run_kind(checkpoint: str) -> Optional[str]:
    """The recipe kind of the run a checkpoint belongs to (runs/x/checkpoints/step_N -> runs/x)."""
    from emojikit.composition.recipe import read_toml

    recipe = Path(checkpoint).parent.parent / "recipe.toml"
    try:
        return read_toml(recipe).get("kind") if recipe.is_file() else None
    except Exception:  # a hand-made checkpoint directory: no label, no failure
        return None


def senders(start: Optional[str], final: str) -> dict[str, str]:
    """Row label -> what evaluate_checkpoints plays: base, the start, the final, the teacher."""
    from emojikit.evaluation import evaluate

    rows = {"base": "base"}
    if start is not None:
        rows[run_kind(start) or "start"] = start
    rows["grpo"] = final
    teacher_prefix = getattr(evaluate, "TEACHER_PREFIX", None)  # the eval plays teachers as senders
    if teacher_prefix:
        rows[f"teacher ({TEACHER})"] = teacher_prefix + TEACHER
    return rows


def comparison_recipe(recipe):
    """The GRPO recipe with its own backend config: the comparison loads each checkpoint onto
    the base model, so a start checkpoint the run was built from (init_from) is left out."""
    backend = recipe.components["backend"]
    if getattr(backend.config, "init_from", None) is not None:
        backend = replace(backend, config=backend.config.model_copy(update={"init_from": None}))
    game = recipe.settings["game"]
    g = recipe.settings["grpo"]
    if g.max_turns is not None:
        game = game.model_copy(update={"max_turns": g.max_turns})
    return replace(recipe, components={**recipe.components, "backend": backend}, settings={**recipe.settings, "game": game})


def write_comparison(recipe, run_dir, start: Optional[str], final: str) -> Optional[str]:
    """Play the held-out targets with every row; write and return the markdown table."""
    from emojikit.evaluation.evaluate import EvalSettings, evaluate_checkpoints, game_chart, game_markdown, read_targets
    from emojikit.training.targets import split_targets

    g = recipe.settings["grpo"]
    heldout, _ = split_targets(recipe, g, run_dir)
    if not heldout:
        print("no comparison: [grpo] eval_targets = 0")
        return None
    rows = senders(start, final)
    settings = EvalSettings(checkpoints=list(rows.values()), temperature=g.eval_temperature, unmasked=False)
    results = evaluate_checkpoints(comparison_recipe(recipe), settings, heldout, run_dir.path)
    # Rows by label (base, sft, grpo, teacher); the legend names what each label played.
    results["checkpoints"] = {label: results["checkpoints"][sender] for label, sender in rows.items()}
    results["senders"] = rows
    legend = "; ".join(f"{label} = {sender}" for label, sender in rows.items() if label != sender)
    table = game_markdown(results) + f"\n{legend}\n"
    results["compare_files"] = {}
    # More held-out sets (messages people wrote), every row played; the base model is left out
    # there: it wins almost nothing (the first table) and costs as much time as a trained sender.
    extra_rows = {label: sender for label, sender in rows.items() if sender != "base"}
    extra_settings = EvalSettings(checkpoints=list(extra_rows.values()), temperature=g.eval_temperature, unmasked=False)
    for path in g.compare_files:
        rows_of_file = read_targets(Path(path))
        played = rows_of_file[: g.compare_rows] if g.compare_rows else rows_of_file
        extra = evaluate_checkpoints(comparison_recipe(recipe), extra_settings, played, run_dir.path, pool=[m.text for m in rows_of_file])
        extra["checkpoints"] = {label: extra["checkpoints"][sender] for label, sender in extra_rows.items()}
        extra["pool_rows"] = len(rows_of_file)
        results["compare_files"][str(path)] = extra
        which = "every message" if len(played) == len(rows_of_file) else f"the first {len(played)} of its {len(rows_of_file)} messages, all {len(rows_of_file)} in the judge's pool"
        table += f"\n### {path} ({which}; base left out)\n\n" + game_markdown(extra)
    atomic_write_text(run_dir.file(f"{STEM}.json"), json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    atomic_write_text(run_dir.file(f"{STEM}.md"), table)
    game_chart(results, run_dir.file(f"{STEM}.png"))
    print(table)
    print(f"wrote {run_dir.file(STEM + '.md')}, {STEM}.json and {STEM}.png")
    return table
