"""The main job's closing comparison, timed: each sender loaded once with its first turns replayed
for every reader (LoadedSenders, what write_comparison does) against a fresh load per set and
reader (evaluate_checkpoints without `senders`, as before). Both play a finished GRPO run's
comparison in this process, one after the other, into scratch directories; the bench prints the
seconds of each and whether every game came out the same, turn by turn.

    python bench/comparison.py runs/grpo            # the main job's run directory
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from common import machine, parser, print_header


def play(run: Path, fresh: bool, scratch: Path) -> tuple[float, dict]:
    from emojikit.composition.recipe import load_recipe
    from emojikit.evaluation import comparison, evaluate
    from emojikit.stages.runs import RunDir

    recipe = load_recipe(run / "recipe.toml")
    start = json.loads((run / "start.json").read_text())["start"]
    final = str(run / "checkpoints" / f"step_{recipe.settings['grpo'].steps}")
    keep = evaluate.evaluate_checkpoints
    if fresh:  # the path before LoadedSenders: every call loads its senders and samples every turn
        evaluate.evaluate_checkpoints = lambda *args, senders=None, **kwargs: keep(*args, **kwargs)
    try:
        with RunDir(scratch) as run_dir:
            began = time.perf_counter()
            comparison.write_comparison(recipe, run_dir, start, final)
            seconds = time.perf_counter() - began
    finally:
        evaluate.evaluate_checkpoints = keep
    return seconds, json.loads((scratch / "comparison.json").read_text())


def games(results: dict) -> list:
    """Every sender's episodes on every set under every reader, in a fixed order."""
    entries = [results, *results["compare_files"].values()]
    for played in results.get("readers", {}).values():
        entries += [played["heldout"], *played["compare_files"].values()]
    return [entry["checkpoints"][label].get("per_target") for entry in entries for label in sorted(entry["checkpoints"])]


def main() -> None:
    p = parser(__doc__, threads=0)
    p.add_argument("run", type=Path, help="a finished GRPO run directory (recipe.toml, start.json, its last checkpoint)")
    args = p.parse_args()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    result = {"machine": machine(), "config": {"run": str(args.run), "threads": torch.get_num_threads()}}
    with tempfile.TemporaryDirectory() as tmp:
        kept_s, kept = play(args.run, False, Path(tmp) / "kept")
        fresh_s, fresh = play(args.run, True, Path(tmp) / "fresh")
    result.update(kept_seconds=round(kept_s, 1), fresh_seconds=round(fresh_s, 1), ratio=round(kept_s / fresh_s, 3),
                  same_games=games(kept) == games(fresh))
    if print_header(result, args.json):
        return
    print(f"comparison, each sender loaded once, first turns replayed: {kept_s:.1f} s")
    print(f"comparison, a fresh load per set and reader:              {fresh_s:.1f} s")
    print(f"ratio {kept_s / fresh_s:.3f}; every game the same turn by turn: {result['same_games']}")


if __name__ == "__main__":
    main()
