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

from emojikit.api.config import for_playing
from emojikit.api.errors import ConfigError, EmojikitError
from emojikit.evaluation.spread import comparison_columns, spread_or_note
from emojikit.support.cpu import describe_machine
from emojikit.support.io import atomic_write_text

STEM = "comparison"
TEACHER = "lexicon"  # the offline teacher that made the SFT data: the reference row


def senders(start: Optional[str], final: str) -> dict[str, str]:
    """Row label -> what evaluate_checkpoints plays: base, the start, the final, the teacher."""
    from emojikit.play.teacher_sender import TEACHER_PREFIX
    from emojikit.stages import runs

    rows = {"base": "base"}
    if start is not None:
        start_run = runs.run_of_checkpoint(start)  # labelled by its run's kind; a hand-made checkpoint is "start"
        rows[(runs.run_kind(start_run) if start_run else None) or "start"] = start
    rows["grpo"] = final
    rows[f"teacher ({TEACHER})"] = TEACHER_PREFIX + TEACHER  # the eval plays teachers as senders
    return rows


def comparison_recipe(recipe):
    """The GRPO recipe with its own backend config: the comparison loads each checkpoint onto
    the base model, so the run's training placement (its start, the layers it trains) is left out."""
    backend = recipe.components["backend"]
    backend = replace(backend, config=for_playing(backend.config))
    game = recipe.settings["game"]
    g = recipe.settings["grpo"]
    if g.max_turns is not None:
        game = game.model_copy(update={"max_turns": g.max_turns})
    return replace(recipe, components={**recipe.components, "backend": backend}, settings={**recipe.settings, "game": game})


def carried_judge_settings(written: dict, name: str, registry) -> dict:
    """The settings a recipe's [judge] table writes (not its defaults) that judge `name` also has:
    the pool (distractors, pool_file, ...), so that every reader draws the same one."""
    fields = registry.get("judge", name).config.model_fields
    return {key: value for key, value in written.items() if key != "use" and key in fields}


def reader_recipe(recipe, name: str):
    """The comparison's recipe with judge `name` in the [judge] table, with the settings of the
    recipe's judge that it has (carried_judge_settings)."""
    from emojikit.composition.assembly import choose, preflight

    judge = recipe.components["judge"]
    if name == judge.spec.name:
        raise ConfigError(f"{recipe.path}: [grpo] compare_judges: `{name}` is the judge the run trains against; the comparison plays it already")
    ctx = recipe.context()
    written = judge.config.model_dump(include=judge.config.model_fields_set)
    try:
        kept = carried_judge_settings(written, name, ctx.registry)
    except EmojikitError as exc:
        raise ConfigError(f"{recipe.path}: [grpo] compare_judges: {exc}") from None
    try:
        choice = choose("judge", name, kept, ctx, table="grpo: compare_judges")
        preflight(choice, ctx)  # its API key and files, before anything trains
    except EmojikitError as exc:  # these name the table themselves
        raise ConfigError(f"{recipe.path}: {exc}") from None
    return replace(recipe, components={**recipe.components, "judge": choice})


SMALL_HELDOUT = 32  # fewer held-out targets than this (the smoke recipe's 16): the comparison says it measures nothing


def write_comparison(recipe, run_dir, start: Optional[str], final: str) -> Optional[str]:
    """Play the held-out targets with every row; write and return the markdown table."""
    from emojikit.evaluation.evaluate import game_chart, game_markdown
    from emojikit.play.targets import split_targets

    g = recipe.settings["grpo"]
    heldout, _ = split_targets(recipe, g, run_dir)
    if not heldout:
        print("no comparison: [grpo] eval_targets = 0")
        return None
    from emojikit.evaluation.evaluate import LoadedSenders

    rows = senders(start, final)
    loaded = LoadedSenders()  # each sender loads once; a set's first turn is sampled once for every reader
    results = play_rows(recipe, g, rows, heldout, run_dir, loaded)
    loaded.drop("base")  # played on the held-out set only
    results["senders"] = rows
    legend = "; ".join(f"{label} = {sender}" for label, sender in rows.items() if label != sender)
    table = game_markdown(results) + f"\n{legend}\n"
    # More held-out sets (messages people wrote); the base model is left out there: it wins
    # almost nothing (the first table) and costs as much time as a trained sender.
    extra_rows = {label: sender for label, sender in rows.items() if sender != "base"}
    results["compare_files"] = play_compare_files(recipe, g, extra_rows, run_dir, loaded)
    table += "".join(f"\n### {path} ({entry['which']}; base left out)\n\n" + game_markdown(entry) for path, entry in results["compare_files"].items())
    # The same senders under readers RL did not train against: a gain only the trained reader
    # sees is a pun on that reader, not better communication.
    results["readers"] = {}
    for name in g.compare_judges:
        reader = reader_recipe(recipe, name)
        on_heldout = play_rows(reader, g, extra_rows, heldout, run_dir, loaded)
        results["readers"][name] = {"heldout": on_heldout, "compare_files": play_compare_files(reader, g, extra_rows, run_dir, loaded)}
        table += f"\n## Under the `{name}` judge (the senders above; base left out)\n\n" + game_markdown(on_heldout)
        table += "".join(f"\n### {path} ({entry['which']})\n\n" + game_markdown(entry) for path, entry in results["readers"][name]["compare_files"].items())
    start_label = next((label for label, sender in rows.items() if sender == start), None)
    results["start_label"] = start_label
    results["machine"] = machine = describe_machine()  # the figures move with the CPU kind: say which one made them
    # Written before the seed spread is set beside it: the games are what took the minutes.
    atomic_write_text(run_dir.file(f"{STEM}.json"), json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    head = summary_markdown(results, paired=("grpo", start_label) if start_label else None)
    head += f"\nMeasured on {machine['cpu']} (`cpu_kind` {machine['cpu_kind']}, {machine['cores']} cores), seed {recipe.seed}.\n"
    if len(heldout) < SMALL_HELDOUT:
        head += (f"\n{len(heldout)} held-out targets: too few to measure anything, a check that the chain runs (one target moves a row by "
                 f"{100 / len(heldout):.0f} points).\n")
    if g.seed_spread is not None and start_label is not None:
        head += "\n" + spread_or_note(g.seed_spread, results, run_dir.path)
    else:
        if g.seed_spread is not None:
            head += f"\nThe run started from base: `[grpo] seed_spread` ({g.seed_spread}) records GRPO against a trained start, not set beside it.\n"
        head += (f"\nOne run: a difference of a few points between {start_label or 'the start'} and grpo here is within what another seed "
                 "or CPU moves; `emojikit spread` records several runs' comparisons and `[grpo] seed_spread` prints them beside this one "
                 "(docs/experiments/rl-other-reader.md has the main job's RL stage over seeds).\n")
    table = head + "\n" + table
    atomic_write_text(run_dir.file(f"{STEM}.md"), table)
    game_chart(results, run_dir.file(f"{STEM}.png"))
    print(table)
    print(f"wrote {run_dir.file(STEM + '.md')}, {STEM}.json and {STEM}.png")
    return table


def play_rows(recipe, g, rows: dict[str, str], targets, run_dir, loaded, pool=()) -> dict:
    """evaluate_checkpoints for the rows (label -> sender), its entries keyed by label."""
    from emojikit.evaluation.evaluate import EvalSettings, evaluate_checkpoints

    settings = EvalSettings(checkpoints=list(rows.values()), temperature=g.eval_temperature, unmasked=False)
    results = evaluate_checkpoints(comparison_recipe(recipe), settings, targets, run_dir.path, pool=pool, senders=loaded)
    results["checkpoints"] = {label: results["checkpoints"][sender] for label, sender in rows.items()}
    return results


def play_compare_files(recipe, g, rows: dict[str, str], run_dir, loaded) -> dict:
    """Each compare_files set: its first compare_rows rows played (all when 0), every row in the pool."""
    from emojikit.play.targets import read_targets

    out = {}
    for path in g.compare_files:
        rows_of_file = read_targets(Path(path))
        played = rows_of_file[: g.compare_rows] if g.compare_rows else rows_of_file
        entry = play_rows(recipe, g, rows, played, run_dir, loaded, pool=[m.text for m in rows_of_file])
        entry["pool_rows"] = len(rows_of_file)
        entry["which"] = "every message" if len(played) == len(rows_of_file) else (
            f"the first {len(played)} of its {len(rows_of_file)} messages, all {len(rows_of_file)} in the judge's pool")
        out[str(path)] = entry
    return out


def summary_markdown(results: dict, paired: Optional[tuple[str, str]] = None) -> str:
    """One line per sender: success (first-turn success) on every set, under every reader; with
    `paired` (a, b), a last line: a's gain over b target by target and its exact McNemar p."""
    from emojikit.evaluation.repair import paired_comparison

    columns = comparison_columns(results)
    trained = results["judge"]
    head = " | ".join(f"{'**' + judge + '** (trained)' if judge == trained else judge}: {where}" for judge, where, _ in columns)
    lines = ["Summary: success (first-turn success) per sender; the RL stage trained against the judge marked (trained).", "",
             f"| sender | {head} |", "|---" * (len(columns) + 1) + "|"]
    for label in results["checkpoints"]:
        cells = []
        for _, _, entry in columns:
            m = entry["checkpoints"].get(label, {}).get("masked")
            first = f" ({m['first_turn_success']:.3f})" if m and "first_turn_success" in m else ""
            cells.append(f"{m['success_rate']:.3f}{first}" if m else "-")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    if paired is not None:
        a, b = paired
        cells = []
        for _, _, entry in columns:
            wins = [entry["checkpoints"].get(label, {}).get("per_target_success") for label in (a, b)]
            if None in wins:
                cells.append("-")
                continue
            row = paired_comparison(*wins)
            cells.append(f"{100 * row['difference']:+.1f} points, p {row['mcnemar_p']:.2g} ({row['a_only']} vs {row['b_only']})")
        if any(cell != "-" for cell in cells):
            lines.append(f"| {a} - {b}, paired (McNemar p) | " + " | ".join(cells) + " |")
            lines += ["", f"The last line: {a}'s gain over {b} on the same targets, with the exact McNemar p (targets only {a} wins "
                      f"vs only {b} wins). A p above 0.05 is inside the noise of these targets, and one seed of the RL stage "
                      "adds its own on top."]
    return "\n".join(lines) + "\n"
