"""`emojikit sweep`: one GRPO recipe over several seeds, then a held-out comparison a
researcher can trust: every seed's start and final checkpoints (and a teacher as a reference
row) under several judges, same targets, with the spread between seeds and bootstrap 95 %
intervals over targets and seeds; and the held-out curves of every seed as a PNG.

Each seed is an ordinary `emojikit run` of the recipe with `seed`, `name` and `out` set, so
finished seeds are reused and interrupted ones resumed like any other run.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Optional, Sequence

from emojikit.support.io import atomic_write_text, save_png

START_FILE = "start.json"  # written by grpo.run: the checkpoint the sender started from
BOOTSTRAP_SAMPLES = 2000


def parse_seeds(text: str) -> list[int]:
    from emojikit.api.errors import ConfigError

    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ConfigError(f"--seeds {text}: expected comma-separated integers, e.g. 0,1,2") from None
    if not seeds or len(set(seeds)) != len(seeds) or any(s < 0 for s in seeds):
        raise ConfigError(f"--seeds {text}: expected distinct non-negative integers, e.g. 0,1,2")
    return seeds


def seed_out(out: Path, seed: int) -> Path:
    return out / f"seed{seed}"


def run_seeds(recipe_path: Path, seeds: Sequence[int], overrides: Sequence[str], out: Path, name: str) -> list[Path]:
    """Run the recipe once per seed as `emojikit run` would (plan, reuse, resume, upstream
    stages); the run directory of every seed."""
    from emojikit.stages import pipeline

    # The sweep compares over seeds itself; a per-run comparison would only repeat evals.
    own = ["grpo.compare=false"]
    dirs = []
    for i, seed in enumerate(seeds, start=1):
        print(f"sweep: seed {seed} ({i} of {len(seeds)})")
        stages = pipeline.plan(recipe_path, [*own, *overrides, f"seed={seed}", f"name={name}-seed{seed}", f"out={seed_out(out, seed)}"])
        pipeline.execute(stages)
        dirs.append(stages[-1].run_dir)
    return dirs


def final_checkpoint(run_dir: Path) -> Path:
    from emojikit.api.errors import RunDirectoryError
    from emojikit.stages.runs import latest_checkpoint

    latest = latest_checkpoint(run_dir)
    if latest is None:
        raise RunDirectoryError(f"{run_dir}: no checkpoint (did the run finish?)")
    return latest[1]


def start_checkpoint(run_dir: Path) -> str:
    path = run_dir / START_FILE
    if not path.exists():
        return "base"
    return json.loads(path.read_text(encoding="utf-8")).get("start") or "base"


# --- statistics -----------------------------------------------------------------------------


def bootstrap_interval(values_S_T: list[list[float]], samples: int = BOOTSTRAP_SAMPLES, seed: int = 0) -> tuple[float, float]:
    """95 % interval of the grand mean, resampling seeds and targets (the same targets for
    every resampled seed, so paired differences stay paired)."""
    import numpy as np

    values_S_T_ = np.asarray(values_S_T, dtype=np.float64)
    n_seeds, n_targets = values_S_T_.shape
    rng = np.random.default_rng(seed)
    seeds_B_S = rng.integers(n_seeds, size=(samples, n_seeds))
    targets_B_T = rng.integers(n_targets, size=(samples, n_targets))
    means_B = np.array([values_S_T_[seeds_B_S[b]][:, targets_B_T[b]].mean() for b in range(samples)])
    low, high = np.quantile(means_B, [0.025, 0.975])
    return float(low), float(high)


def describe_runs(values_S_T: list[list[float]]) -> dict:
    per_seed = [statistics.fmean(v) for v in values_S_T]
    low, high = bootstrap_interval(values_S_T)
    return {
        "mean": statistics.fmean(per_seed),
        "std_between_seeds": statistics.pstdev(per_seed) if len(per_seed) > 1 else 0.0,
        "per_seed": per_seed,
        "ci95": [low, high],
    }


def describe_repair(counts_S: list[tuple[int, int]]) -> dict:
    """The repair rate over seeds: turn-2 wins / first-turn misses per seed and pooled (each
    seed misses different targets, so there is no per-target pairing to resample)."""
    wins, misses = sum(w for w, _ in counts_S), sum(m for _, m in counts_S)
    return {"mean": wins / max(misses, 1), "per_seed": [w / max(m, 1) for w, m in counts_S], "repair_wins": wins, "first_turn_misses": misses}


# --- the comparison -------------------------------------------------------------------------


def evaluate_sweep(recipe_path: Path, run_dirs: Sequence[Path], judges: Sequence[str], teacher: Optional[str], out: Path) -> dict:
    """Per judge: every seed's start and final checkpoints on the run's held-out targets,
    sampled with that seed; the teacher (deterministic) once. A run's checkpoints load once for
    every judge, and their first turns (the same under every judge) are sampled once."""
    from emojikit.evaluation.evaluate import EvalSettings, LoadedSenders, eval_targets, evaluate_checkpoints
    from emojikit.composition.recipe import load_recipe

    results: dict = {"recipe": str(recipe_path), "judges": {}, "seeds": []}
    per_judge: dict[str, dict[str, dict[str, list]]] = {judge: {} for judge in judges}
    for run_dir in run_dirs:
        run_recipe = load_recipe(run_dir / "recipe.toml")  # what the run was, --set values included
        g, game = run_recipe.settings["grpo"], run_recipe.settings["game"]
        max_turns = g.max_turns or game.max_turns
        seed = run_recipe.seed
        if seed not in results["seeds"]:
            results["seeds"].append(seed)
        checkpoints = [start_checkpoint(run_dir), str(final_checkpoint(run_dir))]
        if teacher and run_dir == run_dirs[0]:
            checkpoints.append(f"teacher:{teacher}")
        loaded = LoadedSenders()
        for judge in judges:
            per_label = per_judge[judge]
            eval_recipe = eval_recipe_for(run_recipe, judge, max_turns, out)
            settings = EvalSettings(checkpoints=checkpoints, targets_file=g.heldout_file, n_targets=g.eval_targets or None,
                                    temperature=g.eval_temperature, unmasked=False)
            targets = eval_targets(eval_recipe, settings, out)
            print(f"sweep: judge {judge}, seed {seed}: {', '.join(checkpoints)} on {len(targets)} targets")
            report = evaluate_checkpoints(eval_recipe, settings, targets, out, senders=loaded)
            for checkpoint, label in zip(checkpoints, ["start", "grpo", "teacher"]):
                entry = report["checkpoints"][checkpoint]
                rows = per_label.setdefault(label, {"success": [], "similarity": [], "checkpoints": [], "format_violations": [], "first_turn": [], "repair": []})
                rows["success"].append([float(s) for s in entry["per_target_success"]])
                rows["first_turn"].append([float(ep["success"] and ep["n_turns"] == 1) for ep in entry["per_target"]])
                rows["repair"].append((entry["masked"]["repair_wins"], entry["masked"]["first_turn_misses"]))
                rows["similarity"].append(entry["per_target_similarity"])
                rows["checkpoints"].append(checkpoint)
                rows["format_violations"].append(entry["masked"]["format_violations"])
    for judge, per_label in per_judge.items():
        summary = {label: {"success": describe_runs(r["success"]), "similarity": describe_runs(r["similarity"]),
                           "first_turn_success": describe_runs(r["first_turn"]), "repair_rate": describe_repair(r["repair"]),
                           "checkpoints": r["checkpoints"], "format_violations": max(r["format_violations"])} for label, r in per_label.items()}
        paired = lambda key: [[g_ - s_ for g_, s_ in zip(gr, st)] for gr, st in zip(per_label["grpo"][key], per_label["start"][key])]
        summary["gain"] = {"success": describe_runs(paired("success")), "similarity": describe_runs(paired("similarity")),
                           "first_turn_success": describe_runs(paired("first_turn"))}
        results["judges"][judge] = summary
    return results


def eval_recipe_for(run_recipe, judge: str, max_turns: int, out: Path):
    """The run's own components (backend, decoder, reward, prompts) with `judge` swapped in,
    as an eval recipe written to out/eval-<judge>.toml (kept: it is what was measured)."""
    from emojikit.composition.recipe import dump_toml, load_recipe
    from emojikit.evaluation.comparison import carried_judge_settings

    data = {k: v for k, v in run_recipe.data.items() if k not in ("grpo", "judge", "kind", "name", "out")}
    written = run_recipe.data.get("judge", {})
    # Another reader keeps the run's pool settings (distractors, pool_file), so the readers are compared on one pool.
    data["judge"] = written if judge == written.get("use") else {"use": judge, **carried_judge_settings(written, judge, run_recipe.context().registry)}
    data["game"] = {**data.get("game", {}), "max_turns": max_turns}
    placement = type(run_recipe.components["backend"].config).training_placement  # the checkpoints play with their own adapters
    data["backend"] = {k: v for k, v in data["backend"].items() if k not in placement}
    path = out / f"eval-{judge}.toml"
    atomic_write_text(path, dump_toml({"kind": "eval", "name": f"sweep-eval-{judge}", "out": str(out), **data}))
    return load_recipe(path)


def comparison_markdown(results: dict) -> str:
    seeds = results["seeds"]
    lines = [f"Held-out comparison of `{results['recipe']}` over seeds {', '.join(map(str, seeds))}: mean over seeds (std between "
             "seeds) [bootstrap 95 % interval over targets and seeds].", ""]
    for judge, summary in results["judges"].items():
        lines += [f"### judge `{judge}`", "", "| sender | success | similarity | first-turn success | repair rate (turn-2 wins / first-turn misses) | per seed (success) | format violations |", "|---|---|---|---|---|---|---|"]
        for label in ("start", "grpo", "teacher", "gain"):
            if label not in summary:
                continue
            s, m = summary[label]["success"], summary[label]["similarity"]
            cell = lambda d: f"{d['mean']:+.3f} ({d['std_between_seeds']:.3f}) [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}]" if label == "gain" else f"{d['mean']:.3f} ({d['std_between_seeds']:.3f}) [{d['ci95'][0]:.3f}, {d['ci95'][1]:.3f}]"
            name = {"start": "start (SFT)", "grpo": "after GRPO", "teacher": "teacher", "gain": "gain, GRPO - start (paired)"}[label]
            per_seed = " / ".join(f"{v:+.3f}" if label == "gain" else f"{v:.3f}" for v in s["per_seed"])
            violations = f"{summary[label]['format_violations']:.3f}" if label != "gain" else ""
            first = cell(summary[label]["first_turn_success"]) if "first_turn_success" in summary[label] else ""
            r = summary[label].get("repair_rate")
            repair = f"{r['mean']:.3f} ({r['repair_wins']}/{r['first_turn_misses']}; per seed {' / '.join(f'{v:.3f}' for v in r['per_seed'])})" if r else ""
            lines.append(f"| {name} | {cell(s)} | {cell(m)} | {first} | {repair} | {per_seed} | {violations} |")
        lines.append("")
    return "\n".join(lines)


def curves_chart(run_dirs: Sequence[Path], path: Path) -> None:
    """Held-out success and similarity against step, one line per seed (eval.jsonl)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for run_dir in run_dirs:
        rows = sorted((json.loads(line) for line in (run_dir / "eval.jsonl").read_text().splitlines() if line.strip()), key=lambda r: r["step"])
        for ax, key in zip(axes, ("success_rate", "similarity")):
            ax.plot([r["step"] for r in rows], [r[key] for r in rows], marker="o", ms=3, label=run_dir.name)
    for ax, label in zip(axes, ("held-out success rate", "held-out similarity")):
        ax.set_xlabel("GRPO step")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    save_png(fig, path)
    plt.close(fig)


def sweep(recipe_path: Path, seeds: Sequence[int], overrides: Sequence[str], judges: Sequence[str], teacher: Optional[str], out: Optional[Path]) -> Path:
    from emojikit.composition.recipe import load_recipe

    recipe = load_recipe(recipe_path, list(overrides))
    if recipe.kind != "grpo":
        from emojikit.api.errors import ConfigError

        raise ConfigError(f"{recipe_path}: sweep runs grpo recipes; this one is a {recipe.kind} recipe")
    out = Path(out or f"{recipe.out}-sweep")
    run_dirs = run_seeds(recipe_path, seeds, overrides, out, recipe.name)
    results = evaluate_sweep(recipe_path, run_dirs, judges, teacher, out)
    table = comparison_markdown(results)
    atomic_write_text(out / "comparison.json", json.dumps(results, indent=2) + "\n")
    atomic_write_text(out / "comparison.md", table)
    curves_chart(run_dirs, out / "curves.png")
    print(table)
    print(f"wrote {out / 'comparison.md'}, comparison.json and curves.png")
    return out
