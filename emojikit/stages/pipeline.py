"""`emojikit run`: a recipe and the recipes that make its inputs, as a plan of stages.

A recipe may name the recipe that makes its input: `[sft] data = "recipes/data.toml"` (the
data run's sft_train.jsonl and sft_test.jsonl) and `[grpo] start_from = "recipes/sft.toml"`
(that run's final checkpoint). The plan lists the chain upstream first and decides each stage
from the stage.json in its run directory and the stage's fingerprint (emojikit.stages.fingerprint):

  reuse   a finished run with the same fingerprint: nothing to do
  resume  an interrupted run with the same fingerprint: continue from its last checkpoint
  run     otherwise, into the recipe's `out` if that is empty, else `<out>-<fingerprint[:8]>`;
          a directory holding another run is never written to
  skip    an upstream stage whose downstream is reused (its output is not needed)

Recipe paths inside recipes, like every other path a recipe reads, are looked up in the working
directory, else under the recipe's project root (composition.recipe.resolve_recipe_paths), so
`emojikit run /path/to/recipes/grpo.toml` finds recipes/sft.toml from anywhere; run directories
(`out`) are relative to the working directory. --set applies to the named recipe only.
"""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Optional

from emojikit.stages import runs
from emojikit.api.errors import ConfigError, RunDirectoryError
from emojikit.stages.fingerprint import SHORT, changed_keys, fingerprint, input_digests, path_strings
from emojikit.support.io import atomic_write_text
from emojikit.composition.recipe import TRACKING_TABLE, Recipe, check_ready, load_recipe, redact

STAGE_FILE = "stage.json"

# Where a recipe may name the recipe that makes its input: kind -> (table, key, kinds it may name).
UPSTREAM_KEYS = {"sft": ("sft", "data", ("data",)), "grpo": ("grpo", "start_from", ("sft", "grpo", "rft")),
                 "rft": ("rft", "start_from", ("sft", "grpo", "rft"))}
# What an SFT run reads from its data run.
DATA_FILES = {"train_file": "sft_train.jsonl", "test_file": "sft_test.jsonl"}


@dataclass
class Stage:
    path: Path  # the recipe file
    overrides: list[str]  # --set values (the named recipe only)
    recipe: Recipe  # as planned: upstream outputs are not filled in yet
    upstream: Optional["Stage"]
    payload: dict  # what the fingerprint hashes
    fingerprint: str
    action: str  # reuse | resume | run | skip
    run_dir: Path
    why: str
    trackers: list[str] = field(default_factory=list)  # --tracker names: every stage of the command sends to them

    @property
    def kind(self) -> str:
        return self.recipe.kind


# --- what a stage reads ----------------------------------------------------------------------


def upstream_ref(recipe: Recipe) -> Optional[tuple[str, str, str]]:
    """(table, key, recipe path) when the recipe names the recipe that makes its input."""
    if recipe.kind not in UPSTREAM_KEYS:
        return None
    table, key, _ = UPSTREAM_KEYS[recipe.kind]
    settings = recipe.settings[table]
    value = getattr(settings, key, None)
    if value is None or not str(value).endswith(".toml"):
        return None
    if recipe.kind == "sft" and set(DATA_FILES) <= settings.model_fields_set:
        return None  # both files given as plain paths: they win over the data recipe
    return table, key, str(value)


def upstream_run_dirs(recipe: Recipe) -> list[Path]:
    """The run directories of the recipes `emojikit run` runs before this one (start_from, then
    that recipe's own upstream), whether or not they have run."""
    from emojikit.api.errors import EmojikitError

    dirs: list[Path] = []
    seen: set[str] = set()
    current = recipe
    while (ref := upstream_ref(current)) is not None and ref[2] not in seen:
        seen.add(ref[2])
        try:
            current = load_recipe(ref[2])
        except EmojikitError:  # that recipe's own check reports it
            break
        dirs.append(Path(current.out))
    return dirs


def declared_inputs(recipe: Recipe, has_upstream: bool) -> list[Path]:
    """Files a loop reads by default, which a path scan of the recipe cannot see."""
    if recipe.kind == "sft":
        s = recipe.settings["sft"]
        return [getattr(s, name) for name in DATA_FILES if not has_upstream or name in s.model_fields_set]
    if recipe.kind in ("grpo", "rft") and recipe.settings[recipe.kind].start_from == "auto":
        start = runs.resolve_start(recipe.settings[recipe.kind])
        return [Path(start)] if start else []
    return []


def stage_payload(recipe: Recipe, ref: Optional[tuple[str, str, str]], upstream: Optional[Stage]) -> dict:
    # Where a run lives and which trackers watch it do not change what it computes.
    data = {k: v for k, v in redact(recipe.data).items() if k not in ("out", TRACKING_TABLE)}
    # A recipe named as upstream counts by its fingerprint (or not at all, when plain paths win).
    table, key, _ = UPSTREAM_KEYS.get(recipe.kind, ("", "", ()))
    skip = frozenset({(table, key)}) if str(recipe.data.get(table, {}).get(key, "")).endswith(".toml") else frozenset()
    paths = set(path_strings(data, skip)) | {str(p) for p in declared_inputs(recipe, upstream is not None) if Path(p).exists()}
    return {
        "kind": recipe.kind,
        "recipe": data,
        "inputs": input_digests(paths),
        "upstream": {f"{ref[0]}.{ref[1]}": upstream.fingerprint} if upstream else {},
    }


# --- run directories ---------------------------------------------------------------------------


def read_record(run_dir: Path) -> tuple[str, Optional[dict]]:
    """("empty", None), ("record", stage.json) or ("unknown", None) for a directory holding a
    run without a readable stage.json (made before fingerprints, or by hand)."""
    if not run_dir.is_dir() or not any(p.name != ".lock" for p in run_dir.iterdir()):
        return "empty", None
    try:
        record = json.loads((run_dir / STAGE_FILE).read_text(encoding="utf-8"))
        return ("record", record) if isinstance(record, dict) and "fingerprint" in record else ("unknown", None)
    except (OSError, ValueError):
        return "unknown", None


def write_record(run_dir: Path, stage: Stage, status: str, output: Optional[Path] = None) -> None:
    record = {
        "fingerprint": stage.fingerprint,
        "status": status,
        "recipe": str(stage.path),
        "kind": stage.kind,
        "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "output": str(output) if output else None,
        "payload": stage.payload,
    }
    atomic_write_text(run_dir / STAGE_FILE, json.dumps(record, indent=2, ensure_ascii=False) + "\n")


def latest_checkpoint(run_dir: Path) -> Optional[Path]:
    latest = runs.latest_checkpoint(run_dir)
    return latest[1] if latest else None


def stage_output(kind: str, run_dir: Path) -> Path:
    """What a finished stage hands downstream: a data run's directory, else its last checkpoint."""
    if kind == "data":
        return run_dir
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        raise RunDirectoryError(f"{run_dir}: the {kind} run is marked finished but holds no checkpoint")
    return checkpoint


def alternate_dir(out: Path, fp: str) -> Path:
    return out.with_name(f"{out.name}-{fp[:SHORT]}")


def decide(out: Path, fp: str, payload: dict, force_resume: bool) -> tuple[str, Path, str]:
    """(action, run directory, why) for a stage whose recipe says `out`."""
    if force_resume:
        if read_record(out)[0] == "empty":
            raise RunDirectoryError(
                f"{out}: nothing to resume (the run directory is empty or missing); without --resume, emojikit run resumes an interrupted stage by itself"
            )
        return "resume", out, "--resume: continue this run directory from its last checkpoint"
    candidates = [out, alternate_dir(out, fp)]
    states = [(c, *read_record(c)) for c in candidates]
    for candidate, state, record in states:
        if state == "record" and record["fingerprint"] == fp:
            if record.get("status") == "finished":
                return "reuse", candidate, f"finished run of the same recipe and inputs ({fp[:SHORT]})"
            checkpoint = latest_checkpoint(candidate)
            where = f" at {checkpoint.name}" if checkpoint else ""
            return "resume", candidate, f"interrupted{where}; same recipe and inputs ({fp[:SHORT]})"
    notes = []
    for candidate, state, record in states:
        if state == "empty":
            return "run", candidate, "; ".join(notes) or "no run yet"
        if state == "unknown":
            notes.append(f"{candidate} holds a run without a fingerprint (not touched)")
        else:
            changed = changed_keys(record.get("payload", {}), payload)
            shown = ", ".join(changed[:4]) + (f" and {len(changed) - 4} more" if len(changed) > 4 else "")
            notes.append(f"{candidate} holds another version (changed: {shown or 'unknown'})")
    raise RunDirectoryError(f"{out}: " + "; ".join(notes) + "; set another out with --set out=<dir>")


# --- the plan ---------------------------------------------------------------------------------


def plan(path: Path | str, overrides: Optional[list[str]] = None, *, resume: bool = False, no_upstream: bool = False, trackers: Optional[list[str]] = None) -> list[Stage]:
    """Every stage of the chain ending in `path`, upstream first, each with its decision.
    Validates every recipe of the chain before anything runs. `trackers` (--tracker) join
    [tracking] use of every stage (unlike --set, which applies to the named recipe only)."""
    stages: list[Stage] = []
    _plan_stage(Path(path), list(overrides or []), stages, [], resume, list(trackers or []))
    needed = True
    for stage in reversed(stages):  # a reused stage needs nothing from upstream
        if not needed and stage.action != "reuse":
            stage.action, stage.why = "skip", "not needed: the stage after it is reused"
        elif no_upstream and stage is not stages[-1] and stage.action != "reuse":
            raise ConfigError(
                f"--no-upstream: {stage.path} has no finished run of its current recipe (it would {stage.action} "
                f"in {stage.run_dir}: {stage.why}); run without --no-upstream"
            )
        needed = needed and stage.action != "reuse"
    return stages


def _plan_stage(path: Path, overrides: list[str], stages: list[Stage], chain: list[Path], resume: bool, trackers: list[str]) -> Stage:
    if path.resolve() in chain:
        loop = " -> ".join(str(p) for p in chain + [path.resolve()])
        raise ConfigError(f"{path}: recipes name each other in a loop: {loop}")
    recipe = load_recipe(path, overrides, trackers=trackers)
    ref = upstream_ref(recipe)
    upstream = None
    if ref is not None:
        table, key, value = ref
        upstream = _plan_stage(Path(value), [], stages, chain + [path.resolve()], False, trackers)
        kinds = UPSTREAM_KEYS[recipe.kind][2]
        if upstream.kind not in kinds:
            expected = kinds[0] if len(kinds) == 1 else ", ".join(kinds[:-1]) + " or " + kinds[-1]
            raise ConfigError(f"{path}: [{table}] {key}: {value} is a {upstream.kind} recipe; expected a {expected} recipe")
    payload = stage_payload(recipe, ref, upstream)
    fp = fingerprint(payload)
    action, run_dir, why = decide(recipe.out, fp, payload, resume)
    stage = Stage(path, overrides, recipe, upstream, payload, fp, action, run_dir, why, trackers)
    stages.append(stage)
    return stage


def describe(stages: list[Stage]) -> list[str]:
    """The plan, one line per stage: number, kind, action, run directory, why; a stage that
    will run says its size, and the last line the machine (its minutes depend on the CPU kind)."""
    n = len(stages)
    lines = [f"stage {i}/{n}: {s.kind} ({s.path}) {s.action} {s.run_dir}: {s.why}" + (f" ({size})" if s.action in ("run", "resume") and (size := stage_size(s)) else "")
             for i, s in enumerate(stages, 1)]
    if any(s.action in ("run", "resume") for s in stages):
        from emojikit.support.cpu import describe_machine

        m = describe_machine()
        lines.append(f"on {m['cpu']} (`cpu_kind` {m['cpu_kind']}, {m['cores']} cores); each stage's measured minutes per CPU kind: docs/experiments/main-job.md")
    return lines


def stage_size(stage: Stage) -> str:
    """How much a stage does, in its own units: what its minutes scale with."""
    settings = stage.recipe.settings
    if stage.kind == "data":
        return f"{settings['data'].count:,} messages to the teacher"
    if stage.kind == "sft":
        s = settings["sft"]
        if s.steps:
            return f"{s.steps} steps of {s.batch_size} chats"
        share = f"the best-read {s.keep_best_read * 100:g} % of " if s.keep_best_read < 1 else ""
        return f"{s.epochs} pass{'es' if s.epochs > 1 else ''} over {share}the training chats, {s.batch_size} a step"
    if stage.kind == "grpo":
        g = settings["grpo"]
        return f"{g.steps} steps of {g.batch_size} targets x {g.group_size} episodes" + (", then the comparison" if g.compare else "")
    return ""


# --- running ----------------------------------------------------------------------------------


def derived_overrides(stage: Stage) -> list[str]:
    """--set values that point a stage at its upstream's output and at its run directory."""
    extra = []
    if stage.upstream is not None:
        output = stage_output(stage.upstream.kind, stage.upstream.run_dir)
        if stage.kind == "sft":
            fields_set = stage.recipe.settings["sft"].model_fields_set
            extra += [f"sft.{name}={json.dumps(str(output / file))}" for name, file in DATA_FILES.items() if name not in fields_set]
        elif stage.kind in ("grpo", "rft"):
            extra.append(f"{stage.kind}.start_from={json.dumps(str(output))}")
    if stage.run_dir != stage.recipe.out:
        extra.append(f"out={json.dumps(str(stage.run_dir))}")
    return extra


def upstream_overrides(path: Path | str, overrides: Optional[list[str]] = None) -> list[str]:
    """The --set values that point a recipe at its upstream's finished output, as `run` would, for
    a command that reads the recipe's inputs without running it (eval-sft). [] without an upstream."""
    stage = plan(path, overrides)[-1]
    if stage.upstream is None:
        return []
    if stage.upstream.action != "reuse":
        raise ConfigError(
            f"{stage.path}: its input comes from {stage.upstream.path}, which has no finished run of its current recipe "
            f"({stage.upstream.why}); make it with: emojikit run {stage.path}"
        )
    return [o for o in derived_overrides(stage) if not o.startswith("out=")]


def resume_command(stages: list[Stage], stage: Stage) -> str:
    """The command that continues an interrupted stage: the named recipe again (stages resume by
    themselves); --resume only where it names the same directory, so older habits still work."""
    named = stages[-1]
    sets = "".join(f" --set {shlex.quote(o)}" for o in named.overrides) + "".join(f" --tracker {shlex.quote(t)}" for t in named.trackers)
    flag = " --resume" if stage is named and stage.run_dir == stage.recipe.out else ""
    return f"emojikit run {shlex.quote(str(named.path))}{sets}{flag}"


def run_stage(stage: Stage, command: str, announce: Callable[[], None] = lambda: None) -> None:
    """Run or resume one stage; `announce` prints its header once the run directory is ours
    (an error before that is the command's only line)."""
    from emojikit.stages.runs import RunDir

    from emojikit.stages.tracking import tracked

    recipe = load_recipe(stage.path, stage.overrides + derived_overrides(stage), trackers=stage.trackers, typed=stage.overrides)
    recipe.resume_command = command
    check_ready(recipe)  # what the run would reject before training, before the run directory
    runner = recipe.runner()  # imported before the run directory is touched
    with RunDir(stage.run_dir, resume=stage.action == "resume", recipe_toml=recipe.to_toml()) as run_dir:
        run_dir.resume_hint = recipe.resume_hint()
        announce()
        write_record(run_dir.path, stage, "running")
        with tracked(recipe, run_dir):  # code.json, and the trackers of [tracking] (off by default)
            runner(recipe, run_dir)
        write_record(run_dir.path, stage, "finished", stage_output(stage.kind, run_dir.path))


def show_reused(stage: Stage, echo: Callable[[str], None]) -> None:
    """A reused stage says what it holds: its output and, for GRPO, the stored comparison."""
    if stage.kind != "data":
        echo(f"final adapter: {stage_output(stage.kind, stage.run_dir)}")
    comparison = stage.run_dir / "comparison.md"  # written by emojikit.evaluation.comparison (STEM)
    if comparison.is_file():
        echo(comparison.read_text(encoding="utf-8"))


def execute(stages: list[Stage], echo: Callable[[str], None] = print) -> None:
    """Run the plan: a header per stage, then the stage's own progress bar and output."""
    # A GRPO or RFT stage's checks read nothing an upstream stage writes (a held-out file inside
    # an upstream run directory passes until that run has made it): run them before the data and
    # SFT stages, so that a bad held-out file stops the command now, not 20-60 minutes later.
    for stage in stages:
        upstream_runs = stage.upstream is not None and stage.upstream.action in ("run", "resume")
        if stage.action in ("run", "resume") and stage.kind in ("grpo", "rft") and upstream_runs:
            check_ready(stage.recipe)
    for line, stage in zip(describe(stages), stages):
        if stage.action in ("run", "resume"):
            run_stage(stage, resume_command(stages, stage), announce=lambda line=line: echo(line))
            continue
        echo(line)
        if stage.action == "reuse" and stage is stages[-1]:
            show_reused(stage, echo)
    if all(s.action in ("reuse", "skip") for s in stages):
        echo(f"nothing to run: {stages[-1].path} is up to date in {stages[-1].run_dir}")
