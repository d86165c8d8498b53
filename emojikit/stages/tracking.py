"""Trackers: a run sent to TensorBoard, trackio, W&B, MLflow or a third-party tracker.

A recipe's `[tracking] use = [...]` (or `emojikit run --tracker NAME`) names tracker
components (kind `tracker`, emojikit.api.components.Tracker). `tracked(recipe, run_dir)` wraps
every run (emojikit.stages.pipeline, `emojikit eval`): it writes code.json, starts each tracker
with the redacted resolved recipe and code.json as config, and attaches a `Tracking` to the
RunDir. RunDir.log is the one chokepoint: every row a loop appends to metrics.jsonl goes to
each tracker under its own key at its step, every eval.jsonl row (the held-out game) under
`heldout/<key>`. At a successful end the run's tables follow (held-out game, comparison or
eval, data statistics, a few sample episodes), then each tracker's finish.

trackers/state.json in the run directory keeps, per tracker, its run id and the last rows
sent (step, and the files sent at that step):
  resume    the tracker continues the run with that id; rows up to the last sent are not
            sent again (steps re-run from a checkpoint keep their first values in the
            tracker), and a tracker that tells what its store holds (StoredStep) gets the
            rows it lost to a kill -9 again from metrics.jsonl, up to the checkpoint
  failure   a tracker that raises is warned about once and dropped; the run goes on, and
            metrics.jsonl stays the source of truth
A reused stage does not run, so it sends nothing.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional

from emojikit.api.components import StoredStep, TrackedRun

STATE_FILE = Path("trackers") / "state.json"
# Files whose rows go to trackers as metrics, and the prefix of their keys there.
STREAMS = {"metrics.jsonl": "", "eval.jsonl": "heldout/"}
SAMPLE_EPISODES = 8  # episodes (GRPO) or samples (SFT) of the last step sent as a table


def numeric_metrics(row: dict, prefix: str = "") -> dict[str, float]:
    """The row's finite numbers (booleans as 0/1) under prefix + key; `step` is the step."""
    out: dict[str, float] = {}
    for key, value in row.items():
        if key == "step" or isinstance(value, (str, list, dict)) or value is None:
            continue
        if isinstance(value, (bool, int, float)) and math.isfinite(float(value)):
            out[prefix + key] = float(value)
    return out


def _warn(message: str) -> None:
    from emojikit.api.secrets import scrub

    print(f"emojikit: warning: {scrub(message)}", file=sys.stderr, flush=True)


@dataclass
class Active:
    """One tracker of the run and what it was sent."""

    name: str
    tracker: Any
    state: dict = field(default_factory=dict)  # id, step, files (sent at step), tables_sent
    failed: bool = False

    def sent(self, file: str, step: int) -> bool:
        last = self.state.get("step")
        return last is not None and (step < last or (step == last and file in self.state.get("files", [])))

    def mark(self, file: str, step: int) -> None:
        if self.state.get("step") != step:
            self.state["step"], self.state["files"] = step, []
        self.state["files"] = sorted({*self.state["files"], file})


class Tracking:
    """The trackers of one run; RunDir.log hands it every row (on_row)."""

    def __init__(self, run_dir: Path, active: list[Active]):
        self.run_dir = Path(run_dir)
        self.active = active

    # -- failures: warn once, drop the tracker ---------------------------------------------

    def _call(self, entry: Active, what: str, fn, *args) -> Any:
        if entry.failed:
            return None
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - a tracker must never stop the training
            entry.failed = True
            text = " ".join(str(exc).split())[:300]
            _warn(f"tracker {entry.name!r} failed while {what} ({type(exc).__name__}: {text}); "
                  f"the run goes on without it (metrics.jsonl in {self.run_dir} has every step)")
            return None

    def _save(self) -> None:
        from emojikit.support.io import atomic_write_text

        state = {e.name: e.state for e in self.active}
        try:
            (self.run_dir / STATE_FILE).parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.run_dir / STATE_FILE, json.dumps(state, indent=2) + "\n")
        except OSError as exc:  # the state only spares a resume duplicates; the run goes on
            _warn(f"{self.run_dir / STATE_FILE}: {exc}; a resume may send some steps to the trackers again")

    # -- rows ------------------------------------------------------------------------------

    def on_row(self, file: str, row: dict) -> None:
        """A row just appended to `file`: metrics.jsonl and eval.jsonl rows go to every tracker
        that has not had that row (a step re-run after a resume was sent the first time)."""
        step = row.get("step") if file in STREAMS else None
        if not isinstance(step, int) or isinstance(step, bool):
            return
        metrics = numeric_metrics(row, STREAMS[file])
        changed = False
        for entry in self.active:
            if entry.failed or entry.sent(file, step):
                continue
            self._call(entry, f"logging step {step} of {file}", entry.tracker.log_metrics, metrics, step)
            if not entry.failed:
                entry.mark(file, step)
                entry.state["tables_sent"] = False  # a run extended by --resume ends with new tables
                changed = True
        if changed:
            self._save()

    def replay(self, entry: Active, upto: int) -> None:
        """Rows of metrics.jsonl and eval.jsonl up to step `upto` that the tracker has not had,
        in the order the loop wrote them (a step's held-out row before or after its metrics)."""
        from emojikit.support.io import read_jsonl

        rows = []
        for file in STREAMS:
            path = self.run_dir / file
            if path.is_file():
                rows += [(row["step"], file, row) for row in read_jsonl(path, tolerate_torn_tail=True)
                         if isinstance(row.get("step"), int) and row["step"] <= upto]
        for step, file, row in sorted(rows, key=lambda r: (r[0], r[1] != "eval.jsonl")):
            if entry.failed or entry.sent(file, step):
                continue
            self._call(entry, f"sending step {step} of {file} again", entry.tracker.log_metrics, numeric_metrics(row, STREAMS[file]), step)
            if not entry.failed:
                entry.mark(file, step)

    # -- the end ---------------------------------------------------------------------------

    def close(self, status: str) -> None:
        """Tables (after a finished run, once), then finish every tracker."""
        tables = final_tables(self.run_dir) if status == "finished" else []
        for entry in self.active:
            if status == "finished" and not entry.state.get("tables_sent"):
                for name, columns, rows in tables:
                    self._call(entry, f"sending the {name} table", entry.tracker.log_table, name, columns, rows)
                entry.state["tables_sent"] = not entry.failed
            if not entry.failed:
                self._call(entry, "finishing", entry.tracker.finish, status)
            elif entry.tracker is not None:
                with contextlib.suppress(Exception):  # release what it holds; it was warned about already
                    entry.tracker.finish("failed")
        self._save()


def read_state(run_dir: Path) -> dict:
    try:
        state = json.loads((Path(run_dir) / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def open_tracking(recipe, run_dir, code: dict) -> Tracking:
    """Build and start the recipe's trackers (a failure warns and drops that tracker only);
    on a resume, continue their runs and send what a tracker lost up to the last checkpoint."""
    from emojikit.composition.recipe import redact
    from emojikit.stages.runs import latest_checkpoint

    previous = read_state(run_dir.path)
    tracking = Tracking(run_dir.path, [])
    config = redact(recipe.data)
    checkpoint = latest_checkpoint(run_dir.path)
    for choice in recipe.trackers:
        name = choice.spec.name
        state = previous.get(name) if isinstance(previous.get(name), dict) else {}
        entry = Active(name, None, dict(state))
        tracking.active.append(entry)
        entry.tracker = tracking._call(entry, "starting", choice.build, recipe.context(run_dir.path))
        if entry.tracker is None:
            entry.failed = True
            continue
        run = TrackedRun(name=recipe.name, kind=recipe.kind, run_dir=run_dir.path, config=config, code=code,
                         resume_id=state.get("id"), resume_step=state.get("step"))
        run_id = tracking._call(entry, "starting its run", entry.tracker.start, run)
        if entry.failed:
            continue
        if run_id != state.get("id"):  # a new tracker run: nothing of it was sent yet
            entry.state = {"id": run_id}
        if isinstance(entry.tracker, StoredStep) and entry.state.get("step") is not None:
            stored = tracking._call(entry, "reading its store", entry.tracker.stored_step)
            if stored is not None and stored < 0:  # its store holds no step of the run: send them all again
                entry.state = {"id": entry.state["id"]}
            elif stored is not None and stored < entry.state["step"]:  # lost to a kill -9: send the rows after it again
                entry.state.update(step=stored, files=sorted(STREAMS))
            elif stored is not None and stored > entry.state["step"]:  # sent, then killed before the state was saved: not twice
                entry.state.update(step=stored, files=sorted(STREAMS))
        if checkpoint is not None or entry.state.get("step") is not None:
            tracking.replay(entry, checkpoint[0] if checkpoint else 0)
    tracking._save()
    return tracking


@contextlib.contextmanager
def tracked(recipe, run_dir) -> Iterator[Optional[Tracking]]:
    """Around a run: code.json, then (with [tracking]) the trackers attached to run_dir."""
    from emojikit.stages.code_version import write_code_record
    from emojikit.stages.interrupt import Interrupted

    code = write_code_record(run_dir.path, recipe.registry)
    if not recipe.trackers:
        yield None
        return
    tracking = open_tracking(recipe, run_dir, code)
    run_dir.tracking = tracking
    status = "failed"
    try:
        yield tracking
        status = "finished"
    except (KeyboardInterrupt, Interrupted):
        status = "interrupted"
        raise
    finally:
        run_dir.tracking = None
        tracking.close(status)


# --- the tables at the end ------------------------------------------------------------------------


def _read_json(path: Path) -> Optional[dict]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _jsonl(path: Path) -> list[dict]:
    from emojikit.support.io import read_jsonl

    return list(read_jsonl(path, tolerate_torn_tail=True)) if path.is_file() else []


GAME_COLUMNS = ["success_rate", "similarity", "mean_turns", "format_violations"]


def final_tables(run_dir: Path) -> list[tuple[str, list[str], list[list]]]:
    """(name, columns, rows) of what the run leaves: the held-out game over steps, the
    comparison (GRPO) or eval table, data statistics, and sample episodes of the last step."""
    run_dir = Path(run_dir)
    tables: list[tuple[str, list[str], list[list]]] = []
    evals = _jsonl(run_dir / "eval.jsonl")
    if evals:
        tables.append(("heldout", ["step", "targets", *GAME_COLUMNS], [[r.get(k) for k in ["step", "targets", *GAME_COLUMNS]] for r in evals]))
    for stem in ("comparison", "eval"):
        results = _read_json(run_dir / f"{stem}.json")
        checkpoints = results.get("checkpoints") if results else None
        if isinstance(checkpoints, dict):
            rows = [[name, *[(entry.get("masked") or {}).get(k) for k in GAME_COLUMNS]] for name, entry in checkpoints.items() if isinstance(entry, dict)]
            tables.append((stem, ["checkpoint", *GAME_COLUMNS], rows))
    stats = _read_json(run_dir / "data_stats.json")
    if stats:
        tables.append(("data_stats", ["statistic", "value"], [[k, json.dumps(v) if not isinstance(v, str) else v] for k, v in stats.items()]))
    episodes = _jsonl(run_dir / "episodes.jsonl")
    if episodes:
        last = max(e.get("step", 0) for e in episodes)
        rows = []
        for ep in [e for e in episodes if e.get("step") == last][:SAMPLE_EPISODES]:
            turns = ep.get("turns") or []
            rows.append([last, ep.get("target", ""), " | ".join(str(t.get("emoji", "")) for t in turns), " | ".join(str(t.get("guess", "")) for t in turns),
                         turns[-1].get("similarity") if turns else None, bool(ep.get("success")), (ep.get("reward") or {}).get("total")])
        tables.append(("episodes", ["step", "target", "emoji turns", "guesses", "similarity", "success", "reward"], rows))
    samples = _jsonl(run_dir / "samples.jsonl")
    if samples:
        last = max(s.get("step", 0) for s in samples)
        tables.append(("samples", ["step", "prompt", "answer"], [[last, s.get("prompt", ""), s.get("answer", "")] for s in samples if s.get("step") == last][:SAMPLE_EPISODES]))
    return tables
