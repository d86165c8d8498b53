"""The Runs mode: what `emojikit report` and `inspect` show, as JSON for the page.

A run is named by its directory's name under the runs root given at start; the browser never
sends a path, and a name is looked up among the root's run directories, never joined blindly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from emojikit.api.errors import EmojikitError
from emojikit.ui.inspect_run import PLOTS, RUN_MARKERS, select_episodes
from emojikit.support.io import read_jsonl

MAX_EPISODES = 50  # episodes per answer


class RunNotFound(KeyError):
    pass


def _rows(path: Path) -> list[dict]:
    return list(read_jsonl(path, tolerate_torn_tail=True)) if path.exists() else []


def run_names(root: Path) -> list[str]:
    """Run directories directly under root (those with a run's files), sorted."""
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir() and any((p / m).exists() for m in RUN_MARKERS))


def list_runs(root: Path) -> list[dict]:
    out = []
    for name in run_names(root):
        kind = ""
        recipe = root / name / "recipe.toml"
        if recipe.exists():
            import tomllib

            try:
                kind = str(tomllib.loads(recipe.read_text(encoding="utf-8")).get("kind", ""))
            except (tomllib.TOMLDecodeError, OSError, UnicodeDecodeError):
                kind = "?"
        out.append({"id": name, "kind": kind, "episodes": (root / name / "episodes.jsonl").exists()})
    return out


def _run_dir(root: Path, name: str) -> Path:
    if name not in run_names(root):
        raise RunNotFound(name)
    return root / name


def run_metrics(root: Path, name: str) -> dict:
    """The curves `report` draws (training and held-out) and the eval table rows."""
    run = _run_dir(root, name)
    try:
        metrics, evals = _rows(run / "metrics.jsonl"), _rows(run / "eval.jsonl")
    except EmojikitError as exc:
        return {"id": name, "curves": [], "evals": [], "error": str(exc)}
    curves = []
    for key, title, _stem in PLOTS:
        points = [[r["step"], float(r[key])] for r in metrics if isinstance(r.get("step"), int) and isinstance(r.get(key), (int, float))]
        held = [[r["step"], float(r[key])] for r in evals if isinstance(r.get("step"), int) and isinstance(r.get(key), (int, float))]
        if points or held:
            curves.append({"key": key, "title": title, "training": points, "heldout": held})
    keep = ("step", "targets", "success_rate", "similarity", "mean_turns", "format_violations")
    return {"id": name, "curves": curves, "evals": [{k: r.get(k) for k in keep} for r in evals], "error": ""}


def run_episodes(root: Path, name: str, *, step: Optional[int] = None, target: Optional[str] = None, order: str = "file", limit: int = 20) -> dict:
    """Episodes chosen as `inspect` chooses them: by step, target text, best or worst."""
    run = _run_dir(root, name)
    limit = max(1, min(int(limit), MAX_EPISODES))
    try:
        episodes = [ep for ep in _rows(run / "episodes.jsonl") if isinstance(ep.get("target"), str) and isinstance(ep.get("turns"), list)]
    except EmojikitError as exc:
        return {"id": name, "total": 0, "episodes": [], "error": str(exc)}
    for ep in episodes:
        ep["reward"] = ep["reward"] if isinstance(ep.get("reward"), dict) else {}
    chosen = select_episodes(
        episodes, step=step, target=target or None,
        worst=limit if order == "worst" else None, best=limit if order == "best" else None,
    )[:limit]
    shown = [
        {
            "step": ep.get("step"),
            "target": ep["target"],
            "success": bool(ep.get("success")),
            "reward": float(ep["reward"].get("total", 0.0)),
            "turns": [{"emoji": str(t.get("emoji", "")), "valid": bool(t.get("valid", True)), "guess": str(t.get("guess", "")), "similarity": float(t.get("similarity", 0.0))} for t in ep["turns"] if isinstance(t, dict)],
        }
        for ep in chosen
    ]
    return {"id": name, "total": len(episodes), "episodes": shown, "error": ""}
