"""The seed spread beside one run's comparison.

One run of the main job is one draw: another seed or another CPU moves its rows by a few points
(docs/experiments/main-job.md). `emojikit spread RUN...` gathers the comparisons of several runs of
one GRPO recipe (its seeds) into a record: for every column of the comparison (a reader and a
held-out set), every run's per-target success for the start and the GRPO sender, over the game and
on the first turn. With `[grpo] seed_spread` naming such a record, a later run's comparison prints
its own rows beside the recorded runs' mean and spread and a paired test of GRPO against its start,
and says which recorded gains are outside noise and which are not.

The test takes the targets as its units: the runs play the same targets (and, in the main job, from
starts trained on the same pairs), so a target one run flips tends to flip in the others, and
counting each run's flips as new evidence would find noise significant. Each target's GRPO - start
difference is summed over the runs, and an exact two-sided sign test asks whether the targets that
gained outnumber those that lost by more than chance; with one run it is McNemar's exact test.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from pathlib import Path
from typing import Iterable, Optional, Sequence

from emojikit.api.errors import ConfigError, EmojikitError, InputFileError, RunDirectoryError

FORMAT = "emojikit seed spread 1"
# What may differ between the recorded runs (and between them and a later run) of one recipe: each
# run's seed, name and paths, and what a run reports along the way rather than what it trains.
PER_RUN_KEYS = frozenset({"seed", "name", "out", "grpo.start_from", "grpo.sft_run", "sft.train_file", "sft.test_file", "backend.init_from",
                          "sft.eval_every", "sft.sample_every", "sft.save_every", "sft.report_examples",
                          "grpo.eval_every", "grpo.save_every", "grpo.log_groups", "grpo.compare", "grpo.seed_spread"})
PER_RUN_TABLES = ("tracking.",)  # where a run's metrics also go
NOISE_P = 0.05  # a recorded gain is outside noise when every run has its sign and the targets' sign test is below this


# --- reading runs -----------------------------------------------------------------------------------


def comparison_columns(results: dict) -> list[tuple[str, str, dict]]:
    """(reader, set, entry) for every table a comparison played: its judge on the held-out targets and
    on each compare file, then every other reader on the same sets."""
    columns = [(results["judge"], "held-out", results)]
    columns += [(results["judge"], Path(p).stem, e) for p, e in results.get("compare_files", {}).items()]
    for name, played in results.get("readers", {}).items():
        columns += [(name, "held-out", played["heldout"])]
        columns += [(name, Path(p).stem, e) for p, e in played["compare_files"].items()]
    return columns


def start_label(results: dict) -> Optional[str]:
    """The comparison's row for the start checkpoint (its run's kind, e.g. "sft"), or None."""
    if results.get("start_label"):
        return results["start_label"]
    return next((label for label in results["checkpoints"] if label not in ("base", "grpo") and not label.startswith("teacher")), None)


def read_comparison(run_dir: Path) -> dict:
    """A GRPO run's comparison.json, checked for what a record reads: a one-line error naming the file."""
    path = run_dir / "comparison.json"
    if not path.is_file():
        raise RunDirectoryError(f"{run_dir}: no comparison.json (a finished GRPO run with [grpo] compare = true)")
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
        label = start_label(results)
        if label is None:
            raise RunDirectoryError(f"{path}: no start row (the run started from base): nothing to set GRPO against")
        results["senders"][label]
        for _, _, entry in comparison_columns(results):
            for row in (label, "grpo"):
                if len(entry["checkpoints"][row]["per_target"]) != len(entry["checkpoints"][row]["per_target_success"]):
                    raise ValueError("per_target and per_target_success differ in length")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputFileError(f"{path}: cannot read it: {exc}") from None
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise InputFileError(f"{path}: not a GRPO run's comparison as emojikit spread reads it (no {exc}); run the comparison again "
                             f"with this emojikit") from None
    return results


def flat_settings(recipe_file: Path) -> dict:
    """A run's recipe.toml as table.key -> value, the per-run keys left out."""
    from emojikit.composition.recipe import read_toml

    flat: dict = {}

    def walk(prefix: str, table: dict) -> None:
        for key, value in table.items():
            name = f"{prefix}{key}"
            if isinstance(value, dict):
                walk(name + ".", value)
            elif name not in PER_RUN_KEYS and not name.startswith(PER_RUN_TABLES):
                flat[name] = value

    walk("", read_toml(recipe_file))
    return flat


def start_recipe_file(run_dir: Path, results: dict) -> tuple[Optional[Path], list[Path]]:
    """The recipe.toml of the start checkpoint's run, and where it was looked for. A relative
    checkpoint path is relative to where the run ran: the project holding runs/NAME (tried first),
    or the working directory."""
    from emojikit.stages.runs import run_of_checkpoint

    start_run = run_of_checkpoint(results["senders"][start_label(results)])
    if start_run is None:
        return None, []
    recipe = start_run / "recipe.toml"
    places = [recipe] if recipe.is_absolute() else [run_dir.parent.parent / recipe, recipe]
    return next((p for p in places if p.is_file()), None), places


def differences(a: dict, b: dict) -> list[str]:
    return sorted(key for key in a.keys() | b.keys() if a.get(key) != b.get(key))


def wins_text(per_target_success: Iterable) -> str:
    """Per-target success as a string of 0s and 1s, one character a target (a record stays small and diffable)."""
    return "".join("1" if won else "0" for won in per_target_success)


def wins(text: str) -> list[int]:
    return [int(c) for c in text]


def first_turn_wins(entry: dict) -> str:
    return wins_text(ep["success"] and ep["n_turns"] == 1 for ep in entry["per_target"])


def targets_digest(entry: dict) -> str:
    return hashlib.sha256("\n".join(t["target"] for t in entry["per_target"]).encode()).hexdigest()[:16]


def code_commit(run_dir: Path) -> Optional[str]:
    from emojikit.stages.code_version import read_code_record

    git = (read_code_record(run_dir) or {}).get("git")
    if not isinstance(git, dict) or not git.get("commit"):
        return None
    return str(git["commit"]) + (" (dirty)" if git.get("dirty") else "")


def record(run_dirs: Sequence[Path]) -> dict:
    """The spread record of several runs of one GRPO recipe: per column, each run's per-target success."""
    from emojikit.composition.recipe import read_toml

    run_dirs = [Path(d) for d in run_dirs]
    if len({d.resolve() for d in run_dirs}) != len(run_dirs) or len(run_dirs) < 2:
        raise ConfigError("spread: give at least two distinct run directories (the runs of one recipe, e.g. its seeds)")
    runs, columns, played_by = [], {}, {}
    settings = start_settings = None
    for run_dir in run_dirs:
        results = read_comparison(run_dir)
        label = start_label(results)
        start_file, places = start_recipe_file(run_dir, results)
        if start_file is None and not places:
            raise RunDirectoryError(f"{run_dir}: its start {results['senders'][label]} is not a checkpoint in a run directory "
                                    "(runs/NAME/checkpoints/step_N), so its recipe cannot be compared")
        if start_file is None:
            raise RunDirectoryError(f"{run_dir}: the start's recipe.toml is not at {' or '.join(map(str, places))}: "
                                    "record runs whose start run directories are where they ran")
        mine, start = flat_settings(run_dir / "recipe.toml"), flat_settings(start_file)
        if settings is None:
            settings, start_settings = mine, start
        elif differences(settings, mine) or differences(start_settings, start):
            keys = differences(settings, mine) + [f"start: {k}" for k in differences(start_settings, start)]
            raise ConfigError(f"spread: {run_dir} is not a run of the recipe of {run_dirs[0]} (differs in: {', '.join(keys)}); "
                              "record runs that differ only in seed")
        runs.append({"run": str(run_dir), "seed": results.get("seed"), "start": results["senders"][label],
                     "start_seed": read_toml(start_file).get("seed"), "commit": code_commit(run_dir), "machine": results.get("machine", {})})
        for reader, where, entry in comparison_columns(results):
            key = f"{reader}: {where}"
            start_row, grpo_row = entry["checkpoints"][label], entry["checkpoints"]["grpo"]
            column = columns.setdefault(key, {"targets": len(start_row["per_target_success"]), "targets_sha256": targets_digest(start_row),
                                              "start": [], "grpo": [], "start_first_turn": [], "grpo_first_turn": []})
            if targets_digest(start_row) != column["targets_sha256"]:
                raise ConfigError(f"spread: {run_dir}: its `{key}` column played other targets than {played_by[key]}'s")
            played_by.setdefault(key, run_dir)
            column["start"].append(wins_text(start_row["per_target_success"]))
            column["grpo"].append(wins_text(grpo_row["per_target_success"]))
            column["start_first_turn"].append(first_turn_wins(start_row))
            column["grpo_first_turn"].append(first_turn_wins(grpo_row))
        missing = [key for key in columns if key not in {f"{r}: {w}" for r, w, _ in comparison_columns(results)}]
        if missing:
            raise ConfigError(f"spread: {run_dir}'s comparison has no `{missing[0]}` column, which {played_by[missing[0]]}'s has")
    for key, column in columns.items():
        if len(column["start"]) != len(runs):
            raise ConfigError(f"spread: {run_dirs[0]}'s comparison has no `{key}` column, which {played_by[key]}'s has")
    return {"format": FORMAT, "recipe": settings, "start_recipe": start_settings, "runs": runs, "columns": columns}


def read_record(path: Path) -> dict:
    """A seed-spread file, checked: a one-line error naming the file when it is not one."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputFileError(f"{path}: cannot read the seed-spread file: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise InputFileError(f"{path}: not a seed-spread file (not UTF-8 text: {exc.reason})") from None
    except json.JSONDecodeError as exc:
        raise InputFileError(f"{path}:{exc.lineno}: not JSON: {exc.msg}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InputFileError(f'{path}: not a seed-spread file (expected "format": "{FORMAT}"; `emojikit spread RUN...` writes one)')
    runs = data.get("runs")
    if not isinstance(runs, list) or len(runs) < 2 or not all(isinstance(r, dict) for r in runs):
        raise InputFileError(f"{path}: expected \"runs\": a list of at least two runs (objects)")
    if not isinstance(data.get("columns"), dict) or not data["columns"]:
        raise InputFileError(f"{path}: no columns recorded")
    for key, column in data["columns"].items():
        if not isinstance(column, dict) or not isinstance(column.get("targets"), int) or not isinstance(column.get("targets_sha256", ""), str):
            raise InputFileError(f"{path}: column `{key}`: expected an object with the number of targets (\"targets\")")
        optional = [label for label in ("start_first_turn", "grpo_first_turn") if label in column]
        rows = [column.get(label) for label in ("start", "grpo", *optional)]
        if any(not isinstance(row, list) or len(row) != len(runs) for row in rows) or any(
                not isinstance(t, str) or len(t) != column["targets"] or set(t) - {"0", "1"} for row in rows for t in row):
            raise InputFileError(f"{path}: column `{key}`: expected start and grpo (and their _first_turn), each one string of "
                                 f"{column['targets']} 0s and 1s (a target's success) per run")
    return data


# --- beside a run's comparison ----------------------------------------------------------------------


def points(fraction: float) -> str:
    """A success difference in points, signed, one decimal (no "-0.0" from float rounding)."""
    return f"{round(100 * fraction, 1) + 0.0:+.1f}"


def mean_std(values: list[float]) -> tuple[float, float]:
    """The mean and the sample standard deviation between runs (n - 1)."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def recorded_gain(column: dict, first_turn: bool = False) -> dict:
    """GRPO - start over the recorded runs (on the first turn, or over the game): per run, their mean
    and std, the targets' sign test (each target's difference summed over the runs), and whether it
    is outside noise (every run the same sign and p < NOISE_P)."""
    from emojikit.evaluation.repair import mcnemar_exact

    suffix = "_first_turn" if first_turn else ""
    start, grpo = [wins(t) for t in column["start" + suffix]], [wins(t) for t in column["grpo" + suffix]]
    per_run = [statistics.fmean(g) - statistics.fmean(s) for s, g in zip(start, grpo)]
    per_target = [sum(g[t] - s[t] for s, g in zip(start, grpo)) for t in range(len(start[0]))]
    gained, lost = sum(d > 0 for d in per_target), sum(d < 0 for d in per_target)
    p = mcnemar_exact(gained, lost)  # the exact sign test over the targets that moved
    mean, std = mean_std(per_run)
    same_sign = all(d > 0 for d in per_run) or all(d < 0 for d in per_run)
    return {"per_run": per_run, "mean": mean, "std": std, "targets_gained": gained, "targets_lost": lost, "p": p,
            "outside_noise": same_sign and p < NOISE_P}


def spread_markdown(data: dict, path: Path, results: dict, run_dir: Optional[Path] = None) -> str:
    """This run's start and GRPO rows beside the recorded runs', column by column, and what is outside noise."""
    label = start_label(results) or "start"
    runs = data["runs"]
    kinds = sorted({str(r.get("machine", {}).get("cpu_kind", "unknown")) for r in runs})
    seeds = ", ".join(f"{r.get('start_seed', '?')}/{r.get('seed', '?')}" for r in runs)
    lines = [f"## Beside the recorded seed spread (`{path}`)", "",
             f"{len(runs)} recorded runs of this recipe (start seed / GRPO seed: {seeds}; CPU: {', '.join(kinds)}): success, the mean "
             f"± std between runs; grpo - {label}: per run, and the sign test over the targets (each target's difference summed "
             "over the runs). This run beside them.", ""]
    if run_dir is not None and label in results["checkpoints"]:
        start_file, _ = start_recipe_file(run_dir, results)
        mine, start = flat_settings(run_dir / "recipe.toml"), (flat_settings(start_file) if start_file else {})
        keys = differences(data.get("recipe", {}), mine) + [f"start: {k}" for k in differences(data.get("start_recipe", {}), start)]
        if keys:
            lines += [f"The recorded runs had another recipe (differs in: {', '.join(keys)}): their spread is a scale, not this recipe's noise.", ""]
    lines += [f"| reader: set | {label}, this run | {label}, recorded | grpo, this run | grpo, recorded | grpo - {label}, this run "
              f"| grpo - {label}, recorded (per run; targets gained vs lost, p) | on the first turn, recorded |", "|---|---|---|---|---|---|---|---|"]
    outside, inside = [], []
    played = comparison_columns(results)
    for reader, where, entry in played:
        key = f"{reader}: {where}"
        shown = f"{reader} (trained): {where}" if reader == results["judge"] else key
        column, rows = data["columns"].get(key), entry["checkpoints"]
        if label not in rows or "grpo" not in rows:
            continue
        start_now, grpo_now = (statistics.fmean(rows[x]["per_target_success"]) for x in (label, "grpo"))

        def row(recorded_start: str, recorded_grpo: str = "", recorded: str = "", first: str = "") -> str:
            return (f"| {shown} | {start_now:.3f} | {recorded_start} | {grpo_now:.3f} | {recorded_grpo} | "
                    f"{points(grpo_now - start_now)} points | {recorded} | {first} |")

        if column is None:
            lines.append(row("not recorded"))
            continue
        same_targets = len(rows[label]["per_target_success"]) == column["targets"] and (
            "per_target" not in rows[label] or targets_digest(rows[label]) == column.get("targets_sha256", targets_digest(rows[label])))
        if not same_targets:
            lines.append(row(f"recorded on other targets ({column['targets']})"))
            continue
        s_mean, s_std = mean_std([statistics.fmean(wins(t)) for t in column["start"]])
        g_mean, g_std = mean_std([statistics.fmean(wins(t)) for t in column["grpo"]])
        gain = recorded_gain(column)
        per_run = " / ".join(points(d) for d in gain["per_run"])
        first = ""
        if column.get("start_first_turn") and column.get("grpo_first_turn"):
            turn_one = recorded_gain(column, first_turn=True)
            first = f"{points(turn_one['mean'])} ± {100 * turn_one['std']:.1f} ({turn_one['targets_gained']} vs {turn_one['targets_lost']}, p {turn_one['p']:.2g})"
        lines.append(row(f"{s_mean:.3f} ± {s_std:.3f}", f"{g_mean:.3f} ± {g_std:.3f}",
                         f"{points(gain['mean'])} ± {100 * gain['std']:.1f} ({per_run}; {gain['targets_gained']} vs {gain['targets_lost']}, p {gain['p']:.2g})",
                         first))
        (outside if gain["outside_noise"] else inside).append(f"`{key}` ({points(gain['mean'])})")
    recorded_only = [key for key in data["columns"] if key not in {f"{r}: {w}" for r, w, _ in played}]
    lines.append("")
    if recorded_only:
        lines += [f"Recorded, not played by this run: {', '.join(f'`{k}`' for k in recorded_only)}.", ""]
    lines.append(f"Gains outside noise over the recorded runs (every run the same sign, p < {NOISE_P}): "
                 + (", ".join(outside) if outside else "none") + ".")
    lines.append("Inside noise: " + (", ".join(inside) if inside else "none") + ". A gain inside noise is not a result, whatever one run shows.")
    return "\n".join(lines) + "\n"


def spread_or_note(path: Path, results: dict, run_dir: Path) -> str:
    """spread_markdown, or one line saying why the record could not be set beside this run (the
    comparison's games are worth more than the record: a moved or broken file does not lose them)."""
    try:
        return spread_markdown(read_record(path), path, results, run_dir)
    except EmojikitError as exc:
        return f"The seed spread of `[grpo] seed_spread` is not set beside this run: {exc}\n"
