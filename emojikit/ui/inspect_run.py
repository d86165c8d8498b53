"""Looking at a finished (or running) run: `emojikit inspect` and `emojikit report`.

inspect browses episodes.jsonl (the sampled groups grpo.py logs each step); report plots
metrics.jsonl and writes report.md with the held-out tables and example episodes. Both only
read the run's files, so they work while training still appends to them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional, Sequence

from emojikit.api.errors import InputFileError, RunDirectoryError
from emojikit.support.io import atomic_write_text, read_jsonl, save_png

RUN_MARKERS = ("recipe.toml", "metrics.jsonl", "episodes.jsonl", "eval.jsonl", "eval.json")

# (metrics.jsonl key, title, file stem): the curves `report` draws, when the run logged them.
PLOTS = [
    ("reward_mean", "reward (mean over episodes)", "reward"),
    ("similarity", "final similarity", "similarity"),
    ("success_rate", "success rate", "success_rate"),
    ("kl", "KL to the start policy (per token)", "kl"),
    ("mean_turns", "turns per episode", "turns"),
    ("loss", "loss", "loss"),
]
# Held-out points from eval.jsonl drawn over the training curve of the same quantity.
EVAL_OVERLAY = {"similarity": "similarity", "success_rate": "success_rate", "mean_turns": "mean_turns"}


def missing_run_hint(path: Path) -> str:
    """How a missing run directory comes to be: the recipe of that name, else the runs beside it."""
    recipe = Path("recipes") / f"{path.name}.toml"
    if path.parent.name == "runs" and recipe.is_file():  # runs/NAME: the default out of recipes/NAME.toml
        return f" (make it with: emojikit run {recipe})"
    beside = sorted(p.name for p in path.parent.glob("*") if p.is_dir() and any((p / m).exists() for m in RUN_MARKERS)) if path.parent.is_dir() else []
    if beside:
        return f" (run directories in {path.parent}: {', '.join(beside[:8])}{', ...' if len(beside) > 8 else ''})"
    return " (make one with: emojikit run RECIPE)"


def run_path(path: Path | str) -> Path:
    """The run directory, or a one-line error when `path` is not one."""
    path = Path(path)
    if not path.exists():
        raise RunDirectoryError(f"{path}: no such run directory{missing_run_hint(path)}")
    if not path.is_dir():
        raise RunDirectoryError(f"{path}: not a directory (expected a run directory such as runs/grpo)")
    if not any((path / name).exists() for name in RUN_MARKERS):
        raise RunDirectoryError(f"{path}: not a run directory (none of {', '.join(RUN_MARKERS)} in it)")
    return path


def _rows(path: Path) -> list[dict]:
    return list(read_jsonl(path, tolerate_torn_tail=True)) if path.exists() else []


# --- inspect ----------------------------------------------------------------------------------


def load_episodes(run: Path) -> list[dict]:
    """Every row of episodes.jsonl, checked for the keys inspect shows (errors name file:line)."""
    path = run / "episodes.jsonl"
    if not path.exists():
        raise RunDirectoryError(f"{run}: no episodes.jsonl (GRPO runs log their sampled episodes there)")
    episodes = []
    with open(path, encoding="utf-8") as f:
        numbers = [n for n, line in enumerate(f, start=1) if line.strip()]
    for number, row in zip(numbers, _rows(path)):
        for key, kind in (("target", str), ("turns", list), ("reward", dict)):
            if not isinstance(row.get(key), kind):
                raise InputFileError(f"{path}:{number}: {key}: expected a {kind.__name__}")
        episodes.append(row)
    return episodes


def reward_total(episode: dict) -> float:
    return float(episode.get("reward", {}).get("total", 0.0))


def select_episodes(
    episodes: Sequence[dict],
    *,
    step: Optional[int] = None,
    target: Optional[str] = None,
    worst: Optional[int] = None,
    best: Optional[int] = None,
) -> list[dict]:
    """Filter by step and target substring (case-insensitive); --worst/--best N sort by the
    reward total and keep N (best first, or worst first); otherwise file order."""
    if worst is not None and best is not None:
        from emojikit.api.errors import ConfigError

        raise ConfigError("--worst and --best exclude each other")
    chosen = [ep for ep in episodes if step is None or ep.get("step") == step]
    if target:
        needle = target.casefold()
        chosen = [ep for ep in chosen if needle in ep["target"].casefold()]
    if worst is not None:
        chosen = sorted(chosen, key=reward_total)[:worst]
    elif best is not None:
        chosen = sorted(chosen, key=reward_total, reverse=True)[:best]
    return chosen


def format_episode(ep: dict) -> str:
    """One episode as a few aligned lines: header, target, each turn, reward breakdown."""
    where = []
    if "step" in ep:
        where.append(f"step {ep['step']}")
    if "group" in ep:
        where.append(f"group {ep['group']}")
    outcome = f"success on turn {len(ep['turns'])}" if ep.get("success") else f"no success in {len(ep['turns'])} turns"
    header = " · ".join(where + [f"reward {reward_total(ep):.3f}", outcome, f"category {ep.get('category', 'unknown')}"])
    lines = [header, f"  target   {ep['target']}"]
    for number, turn in enumerate(ep["turns"], start=1):
        mark = "" if turn.get("valid", True) else "  (not valid emoji)"
        lines.append(f"  turn {number}   sender  {turn.get('emoji', '')}{mark}")
        lines.append(f"           judge   \"{turn.get('guess', '')}\"  similarity {float(turn.get('similarity', 0.0)):.3f}")
    parts = [f"{k} {float(v):.3f}" for k, v in ep["reward"].items() if k != "total"]
    lines.append(f"  reward   total {reward_total(ep):.3f}" + (f" ({', '.join(parts)})" if parts else ""))
    return "\n".join(lines)


def inspect_lines(run: Path | str, **filters) -> list[str]:
    """What `emojikit inspect` prints: a summary line, then each chosen episode."""
    run = run_path(run)
    episodes = load_episodes(run)
    chosen = select_episodes(episodes, **filters)
    steps = sorted({ep["step"] for ep in episodes if isinstance(ep.get("step"), int)})
    span = f", steps {steps[0]}-{steps[-1]}" if steps else ""
    lines = [f"{run}: {len(chosen)} of {len(episodes)} episodes{span}"]
    if code := code_line(run):
        lines.append(code)
    for ep in chosen:
        lines += ["", format_episode(ep)]
    return lines


def code_line(run: Path) -> Optional[str]:
    """`code: emojikit 0.1.0, git 1a2b3c4d (clean), plugins: ...` from the run's code.json, if any."""
    from emojikit.stages.code_version import describe_code, read_code_record

    record = read_code_record(run)
    return f"code: {describe_code(record)}" if record else None


# --- report -----------------------------------------------------------------------------------


def plot_metrics(metrics: Sequence[dict], evals: Sequence[dict], out: Path) -> list[tuple[str, Path]]:
    """One PNG per logged curve plus overview.png (all of them in a grid); returns (title, path)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    curves = []
    for key, title, stem in PLOTS:
        points = [(r["step"], float(r[key])) for r in metrics if isinstance(r.get("step"), int) and isinstance(r.get(key), (int, float))]
        if points:
            curves.append((key, title, stem, points))
    if not curves:
        return []

    def draw(ax, key, title, points):
        steps, values = zip(*points)
        ax.plot(steps, values, marker="o" if len(points) < 30 else None, color="#4c72b0", label="training")
        if key == "reward_mean":
            stds = {r["step"]: float(r["reward_std"]) for r in metrics if isinstance(r.get("reward_std"), (int, float))}
            if len(stds) == len(points):
                low = [v - stds[s] for s, v in points]
                high = [v + stds[s] for s, v in points]
                ax.fill_between(steps, low, high, color="#4c72b0", alpha=0.2, label="± std")
        if key in EVAL_OVERLAY:
            held = [(r["step"], float(r[EVAL_OVERLAY[key]])) for r in evals if isinstance(r.get(EVAL_OVERLAY[key]), (int, float))]
            if held:
                ax.plot(*zip(*held), marker="s", linestyle="--", color="#dd8452", label="held-out")
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if key == "success_rate":
            ax.set_ylim(-0.03, 1.03)
        ax.grid(alpha=0.3)
        if len(ax.get_legend_handles_labels()[0]) > 1:
            ax.legend(fontsize=8)

    written = []
    for key, title, stem, points in curves:
        fig, ax = plt.subplots(figsize=(5, 3.2))
        draw(ax, key, title, points)
        fig.tight_layout()
        path = out / f"{stem}.png"
        save_png(fig, path)
        plt.close(fig)
        written.append((title, path))

    columns = min(3, len(curves))
    rows = (len(curves) + columns - 1) // columns
    fig, axes = plt.subplots(rows, columns, figsize=(4.5 * columns, 3 * rows), squeeze=False)
    for ax, (key, title, _stem, points) in zip(axes.flat, curves):
        draw(ax, key, title, points)
    for ax in list(axes.flat)[len(curves):]:
        ax.set_visible(False)
    fig.tight_layout()
    path = out / "overview.png"
    save_png(fig, path)
    plt.close(fig)
    return [("overview", path)] + written


def _eval_table(evals: Sequence[dict]) -> str:
    lines = ["| step | targets | success rate | first-turn success | repair rate | mean similarity | mean turns | format violations |", "|---|---|---|---|---|---|---|---|"]
    for r in evals:
        cells = [str(r.get("step", "-")), str(r.get("targets", "-"))]
        for key, fmt in (("success_rate", "{:.3f}"), ("first_turn_success", "{:.3f}"), ("repair_rate", "{:.3f}"), ("similarity", "{:.3f}"),
                         ("mean_turns", "{:.2f}"), ("format_violations", "{:.3f}")):
            cells.append(fmt.format(r[key]) if isinstance(r.get(key), (int, float)) else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _training_table(metrics: Sequence[dict]) -> str:
    keys = [(key, title) for key, title, _ in PLOTS if any(isinstance(r.get(key), (int, float)) for r in metrics)]
    if not keys:
        return ""
    first, last = metrics[0], metrics[-1]
    lines = [f"| | first (step {first.get('step', '?')}) | last (step {last.get('step', '?')}) |", "|---|---|---|"]
    for key, title in keys:
        cell = lambda r: f"{r[key]:.3f}" if isinstance(r.get(key), (int, float)) else "-"  # noqa: E731
        lines.append(f"| {title} | {cell(first)} | {cell(last)} |")
    return "\n".join(lines)


def _stats_table(path: Path) -> str:
    """data_stats.json as a two-column table, in the file's order (a table of counts: one row a count)."""
    try:
        stats = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputFileError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    if not isinstance(stats, dict):
        raise InputFileError(f"{path}: expected a JSON object of figures")
    lines = ["| figure | value |", "|---|---|"]
    for key, value in stats.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}: {v}" for k, v in value.items())
        lines.append(f"| {key} | {value} |")
    return "\n".join(lines)


def report_markdown(run: Path, metrics: Sequence[dict], evals: Sequence[dict], plots: Sequence[tuple[str, Path]], out: Path, examples: int) -> str:
    lines = [f"# Run report: {run.name}", ""]
    recipe = run / "recipe.toml"
    if recipe.exists():
        import tomllib

        try:
            data = tomllib.loads(recipe.read_text(encoding="utf-8"))
            tables = ", ".join(f"{k} = {v['use']}" for k, v in data.items() if isinstance(v, dict) and "use" in v)
            lines += [f"Recipe: kind `{data.get('kind', '?')}`, name `{data.get('name', '?')}`" + (f"; {tables}." if tables else "."), ""]
        except (tomllib.TOMLDecodeError, OSError):
            lines += [f"(recipe.toml could not be read)", ""]
    if code := code_line(run):
        lines += [code[0].upper() + code[1:] + ".", ""]
    stats = run / "data_stats.json"
    if stats.exists():  # a data run: what it made (docs/data.md says what each figure means)
        lines += ["## Data", "", _stats_table(stats), ""]
    if metrics:
        lines += ["## Training", "", f"{len(metrics)} logged steps.", ""]
        table = _training_table(metrics)
        if table:
            lines += [table, ""]
    for title, path in plots:
        lines += [f"![{title}]({os.path.relpath(path, out)})", ""]
    before_after = run / "before_after.md"
    if before_after.exists() or evals or (run / "eval.md").exists() or (run / "comparison.md").exists():
        lines += ["## Held-out evaluation", ""]
    if before_after.exists():
        lines += [before_after.read_text(encoding="utf-8").strip(), ""]
    if evals:
        lines += ["Every held-out evaluation (eval.jsonl):", "", _eval_table(evals), ""]
    for stem in ("eval", "comparison"):  # an eval run's table; the main job's comparison of base, SFT, GRPO, teacher
        if (run / f"{stem}.md").exists():
            lines += [(run / f"{stem}.md").read_text(encoding="utf-8").strip(), ""]
            if (run / f"{stem}.png").exists():
                lines += [f"![{stem}]({os.path.relpath(run / f'{stem}.png', out)})", ""]
    if (run / "episodes.jsonl").exists() and examples:
        episodes = load_episodes(run)
        last_step = max((ep["step"] for ep in episodes if isinstance(ep.get("step"), int)), default=None)
        pool = [ep for ep in episodes if ep.get("step") == last_step] if last_step is not None else episodes
        if pool:
            lines += ["## Example episodes", "", f"From step {last_step}." if last_step is not None else "", ""]
            best = select_episodes(pool, best=min(examples, (len(pool) + 1) // 2))
            # The worst among the rest, so a small step shows no episode twice.
            worst = select_episodes([ep for ep in pool if not any(ep is b for b in best)], worst=examples)
            for label, chosen in (("Best", best), ("Worst", worst)):
                if chosen:
                    lines += [f"### {label}", "", "```"] + ["\n\n".join(format_episode(ep) for ep in chosen)] + ["```", ""]
    return "\n".join(lines).rstrip() + "\n"


def write_report(run: Path | str, out: Optional[Path] = None, examples: int = 3) -> tuple[Path, list[Path]]:
    """Plots and report.md for a run (into RUN/report by default); returns (report.md, PNGs)."""
    run = run_path(run)
    metrics = _rows(run / "metrics.jsonl")
    evals = _rows(run / "eval.jsonl")
    out = Path(out) if out is not None else run / "report"
    out.mkdir(parents=True, exist_ok=True)
    plots = plot_metrics(metrics, evals, out)
    path = out / "report.md"
    atomic_write_text(path, report_markdown(run, metrics, evals, plots, out, examples))
    return path, [p for _, p in plots]
