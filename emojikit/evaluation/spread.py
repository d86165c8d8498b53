"""The seed spread beside one run's comparison.

One run of the main job is one draw: another seed or another CPU moves its rows by a few points
(docs/experiments/main-job.md). `emojikit spread RUN...` gathers the comparisons of several runs of
one GRPO recipe (its seeds) into a record: for every column of the comparison (a reader and a
held-out set), every run's per-target success for the start (SFT) and the GRPO sender. With
`[grpo] seed_spread` naming such a record, a later run's comparison prints its own figures beside
the recorded runs' mean, their spread and the pooled paired test of GRPO against its start, and says
which recorded differences are outside noise and which are not.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from pathlib import Path
from typing import Iterable, Optional, Sequence

from emojikit.api.errors import ConfigError, InputFileError, RunDirectoryError

FORMAT = "emojikit seed spread 1"
# What may differ between the recorded runs (and between them and a later run) of one recipe: each
# run's seed, name and paths, and what a run reports along the way rather than what it trains.
PER_RUN_KEYS = frozenset({"seed", "name", "out", "grpo.start_from", "sft.train_file", "sft.test_file", "backend.init_from",
                          "sft.eval_every", "sft.sample_every", "sft.save_every", "sft.report_examples",
                          "grpo.eval_every", "grpo.save_every", "grpo.log_groups", "grpo.compare", "grpo.seed_spread"})
NOISE_P = 0.05  # a recorded difference is outside noise when every run has its sign and the pooled p is below this


def comparison_columns(results: dict) -> list[tuple[str, str, dict]]:
    """(reader, set, entry) for every table a comparison played: its judge on the held-out targets and
    on each compare file, then every other reader on the same sets."""
    columns = [(results["judge"], "held-out", results)]
    columns += [(results["judge"], Path(p).stem, e) for p, e in results["compare_files"].items()]
    for name, played in results.get("readers", {}).items():
        columns += [(name, "held-out", played["heldout"])]
        columns += [(name, Path(p).stem, e) for p, e in played["compare_files"].items()]
    return columns


def start_label(results: dict) -> Optional[str]:
    """The comparison's row for the start checkpoint (its run's kind, e.g. "sft"), or None."""
    if results.get("start_label"):
        return results["start_label"]
    return next((label for label in results["checkpoints"] if label not in ("base", "grpo") and not label.startswith("teacher")), None)


def flat_settings(recipe_file: Path) -> dict:
    """A run's recipe.toml as table.key -> value, the per-run keys left out."""
    from emojikit.composition.recipe import read_toml

    flat: dict = {}

    def walk(prefix: str, table: dict) -> None:
        for key, value in table.items():
            name = f"{prefix}{key}"
            if isinstance(value, dict):
                walk(name + ".", value)
            elif name not in PER_RUN_KEYS:
                flat[name] = value

    walk("", read_toml(recipe_file))
    return flat


def start_recipe_file(run_dir: Path, results: dict) -> Optional[Path]:
    """The recipe.toml of the start checkpoint's run. A relative checkpoint path is relative to
    where the run ran: the working directory, or the project holding runs/NAME."""
    start = results["senders"].get(start_label(results) or "")
    if not start:
        return None
    recipe = Path(start).parent.parent / "recipe.toml"
    for candidate in (recipe, run_dir.parent.parent / recipe):
        if candidate.is_file():
            return candidate
    return None


def run_settings(run_dir: Path, results: dict) -> tuple[dict, dict]:
    """The GRPO run's settings and its start's."""
    start = start_recipe_file(run_dir, results)
    return flat_settings(run_dir / "recipe.toml"), (flat_settings(start) if start else {})


def differences(a: dict, b: dict) -> list[str]:
    return sorted(key for key in a.keys() | b.keys() if a.get(key) != b.get(key))


def wins_text(per_target_success: Iterable) -> str:
    """Per-target success as a string of 0s and 1s, one character a target (a record stays small and diffable)."""
    return "".join("1" if won else "0" for won in per_target_success)


def wins(text: str) -> list[int]:
    return [int(c) for c in text]


def targets_digest(entry: dict) -> str:
    return hashlib.sha256("\n".join(t["target"] for t in entry["per_target"]).encode()).hexdigest()[:16]


def read_comparison(run_dir: Path) -> dict:
    path = run_dir / "comparison.json"
    if not path.is_file():
        raise RunDirectoryError(f"{run_dir}: no comparison.json (a finished GRPO run with [grpo] compare = true)")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise InputFileError(f"{path}: not a comparison: {exc}") from None


def record(run_dirs: Sequence[Path]) -> dict:
    """The spread record of several runs of one GRPO recipe: per column, each run's per-target success."""
    if len({Path(d).resolve() for d in run_dirs}) != len(run_dirs) or len(run_dirs) < 2:
        raise ConfigError("spread: give at least two distinct run directories (the runs of one recipe, e.g. its seeds)")
    runs, columns = [], {}
    settings = start_settings = None
    for run_dir in map(Path, run_dirs):
        results = read_comparison(run_dir)
        label = start_label(results)
        if label is None:
            raise RunDirectoryError(f"{run_dir}: its comparison has no start row (the run started from base)")
        mine, start = run_settings(run_dir, results)
        if settings is None:
            settings, start_settings = mine, start
        elif differences(settings, mine) or differences(start_settings, start):
            keys = differences(settings, mine) + [f"start: {k}" for k in differences(start_settings, start)]
            raise ConfigError(f"spread: {run_dir} is not a run of the recipe of {run_dirs[0]} (differs in: {', '.join(keys)}); "
                              "record runs that differ only in seed")
        code = run_dir / "code.json"
        commit = json.loads(code.read_text(encoding="utf-8")).get("git", {}).get("commit") if code.is_file() else None
        runs.append({"run": str(run_dir), "seed": results.get("seed"), "start": results["senders"][label],
                     "start_seed": _start_seed(run_dir, results), "commit": commit,
                     "machine": results.get("machine", {})})
        for reader, where, entry in comparison_columns(results):
            key = f"{reader}: {where}"
            column = columns.setdefault(key, {"targets": len(entry["checkpoints"][label]["per_target_success"]),
                                              "targets_sha256": targets_digest(entry["checkpoints"][label]), "start": [], "grpo": []})
            if targets_digest(entry["checkpoints"][label]) != column["targets_sha256"]:
                raise ConfigError(f"spread: {run_dir}: its `{key}` column played other targets than {run_dirs[0]}'s")
            column["start"].append(wins_text(entry["checkpoints"][label]["per_target_success"]))
            column["grpo"].append(wins_text(entry["checkpoints"]["grpo"]["per_target_success"]))
            for name, row in (("start_first_turn", label), ("grpo_first_turn", "grpo")):  # the turns apart
                column.setdefault(name, []).append(wins_text(ep["success"] and ep["n_turns"] == 1 for ep in entry["checkpoints"][row]["per_target"]))
    for key, column in columns.items():
        if len(column["start"]) != len(runs):
            raise ConfigError(f"spread: the `{key}` column is in {len(column['start'])} of the {len(runs)} runs' comparisons")
    return {"format": FORMAT, "recipe": settings, "start_recipe": start_settings, "runs": runs, "columns": columns}


def _start_seed(run_dir: Path, results: dict) -> Optional[int]:
    from emojikit.composition.recipe import read_toml

    recipe = start_recipe_file(run_dir, results)
    return read_toml(recipe).get("seed") if recipe else None


def read_record(path: Path) -> dict:
    """A seed-spread file, checked: a one-line error naming the file when it is not one."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputFileError(f"{path}: cannot read the seed-spread file: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise InputFileError(f"{path}:{exc.lineno}: not JSON: {exc.msg}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InputFileError(f'{path}: not a seed-spread file (expected "format": "{FORMAT}"; `emojikit spread RUN...` writes one)')
    if not isinstance(data.get("columns"), dict) or not data["columns"] or not isinstance(data.get("runs"), list):
        raise InputFileError(f"{path}: no runs or columns recorded")
    for key, column in data["columns"].items():
        optional = [label for label in ("start_first_turn", "grpo_first_turn") if isinstance(column, dict) and label in column]
        rows = [column.get(label) if isinstance(column, dict) else None for label in ("start", "grpo", *optional)]
        texts = [t for row in rows if isinstance(row, list) for t in row]
        if any(not isinstance(row, list) or len(row) != len(data["runs"]) for row in rows) or \
                any(not isinstance(t, str) or not t or set(t) - {"0", "1"} or len(t) != len(texts[0]) for t in texts):
            raise InputFileError(f"{path}: column `{key}`: expected start and grpo (and their _first_turn), each one string of 0s and 1s per run "
                                 "(a target's success), all of one length")
    return data


# --- beside a run's comparison ----------------------------------------------------------------------


def points(fraction: float) -> str:
    """A success difference in points, signed, one decimal (no "-0.0" from float rounding)."""
    return f"{round(100 * fraction, 1) + 0.0:+.1f}"


def _mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.pstdev(values) if len(values) > 1 else 0.0


def recorded_gain(column: dict, turn: str = "") -> dict:
    """GRPO - start over the recorded runs (turn "_first_turn": first-turn success): per run, mean and std
    between runs, the pooled McNemar p (every run's targets paired), and whether it is outside noise
    (every run the same sign, p < NOISE_P)."""
    from emojikit.evaluation.repair import paired_comparison

    start, grpo = [wins(t) for t in column["start" + turn]], [wins(t) for t in column["grpo" + turn]]
    per_run = [statistics.fmean(g) - statistics.fmean(s) for s, g in zip(start, grpo)]
    pooled = paired_comparison([x for run in grpo for x in run], [x for run in start for x in run])
    mean, std = _mean_std(per_run)
    same_sign = all(d > 0 for d in per_run) or all(d < 0 for d in per_run)
    return {"per_run": per_run, "mean": mean, "std": std, "p": pooled["mcnemar_p"], "outside_noise": same_sign and pooled["mcnemar_p"] < NOISE_P}


def spread_markdown(data: dict, path: Path, results: dict, run_dir: Optional[Path] = None) -> str:
    """This run's start and GRPO rows beside the recorded runs', column by column, and what is outside noise."""
    label = start_label(results)
    runs = data["runs"]
    kinds = sorted({r.get("machine", {}).get("cpu_kind", "unknown") for r in runs})
    seeds = ", ".join(f"{r.get('start_seed')}/{r.get('seed')}" for r in runs)
    lines = [f"## Beside the recorded seed spread (`{path}`)", "",
             f"{len(runs)} recorded runs of this recipe (SFT seed / GRPO seed: {seeds}; CPU: {', '.join(kinds)}): success per run, "
             "mean ± std between runs; GRPO - SFT paired over every run's targets (pooled McNemar p). This run beside them.", ""]
    if run_dir is not None and label is not None:
        mine, start = run_settings(run_dir, results)
        keys = differences(data.get("recipe", {}), mine) + [f"start: {k}" for k in differences(data.get("start_recipe", {}), start)]
        if keys:
            lines += [f"The recorded runs had another recipe (differs in: {', '.join(keys)}): their spread is a scale, not this recipe's noise.", ""]
    lines += ["| reader: set | SFT, this run | SFT, recorded | GRPO, this run | GRPO, recorded | GRPO - SFT, this run | GRPO - SFT, recorded (per run; pooled p) "
              "| GRPO - SFT on the first turn, recorded |", "|---|---|---|---|---|---|---|---|"]
    outside, inside = [], []
    for reader, where, entry in comparison_columns(results):
        key = f"{reader}: {where}"
        column = data["columns"].get(key)
        rows = entry["checkpoints"]
        if column is None or label not in rows or "grpo" not in rows:
            continue
        shown = f"{reader} (trained): {where}" if reader == results["judge"] else key
        if len(column["start"][0]) != len(rows[label]["per_target_success"]):
            lines.append(f"| {shown} | | other targets recorded ({column['targets']}, here {len(rows[label]['per_target_success'])}) | | | | |")
            continue
        start_now, grpo_now = (statistics.fmean(rows[x]["per_target_success"]) for x in (label, "grpo"))
        s_mean, s_std = _mean_std([statistics.fmean(wins(t)) for t in column["start"]])
        g_mean, g_std = _mean_std([statistics.fmean(wins(t)) for t in column["grpo"]])
        gain = recorded_gain(column)
        per_run = " / ".join(points(d) for d in gain["per_run"])
        first = ""
        if column.get("start_first_turn") and column.get("grpo_first_turn"):
            turn_one = recorded_gain(column, "_first_turn")
            first = f"{points(turn_one['mean'])} ± {100 * turn_one['std']:.1f} (p {turn_one['p']:.2g})"
        lines.append(f"| {shown} | {start_now:.3f} | {s_mean:.3f} ± {s_std:.3f} | {grpo_now:.3f} | {g_mean:.3f} ± {g_std:.3f} | "
                     f"{points(grpo_now - start_now)} points | {points(gain['mean'])} ± {100 * gain['std']:.1f} ({per_run}; p {gain['p']:.2g}) | {first} |")
        (outside if gain["outside_noise"] else inside).append(f"`{key}` ({points(gain['mean'])})")
    lines.append("")
    lines.append("Outside noise over the recorded runs (every run the same sign, pooled p < 0.05): " + (", ".join(outside) if outside else "nothing") + ".")
    lines.append("Inside noise: " + (", ".join(inside) if inside else "nothing") + ". A difference inside noise is not a result, "
                 "whatever this one run shows.")
    return "\n".join(lines) + "\n"
