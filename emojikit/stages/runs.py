"""Run directories: resolved recipe, metrics, checkpoints, resume, and a lock.

Layout of runs/<name>/:
  recipe.toml        the resolved recipe, secrets redacted
  metrics.jsonl      one JSON object per step, appended atomically (single write + fsync)
  code.json          the code the run ran: emojikit version, git commit, dirty flag, plugins
  trackers/          the trackers' local files and state.json (run ids, last steps sent; [tracking])
  checkpoints/step_N a checkpoint appears under its final name only once complete
  .lock              held (flock) while a process uses the directory
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
from pathlib import Path
from typing import Iterator, Optional

from emojikit.api.errors import ConfigError, EmojikitError, InputFileError, OutputError, RunDirectoryError
from emojikit.support.io import append_jsonl, atomic_directory, atomic_write_jsonl, atomic_write_text, os_problem, read_jsonl, writing

_STEP_DIR = re.compile(r"^step_(\d+)$")


class RunDir:
    def __init__(self, path: Path | str, *, resume: bool = False, recipe_toml: Optional[str] = None, check_recipe: bool = True):
        self.path = Path(path)
        self.resume = resume
        self._lock_fd: Optional[int] = None
        self.resume_hint = "resume with --resume"  # the CLI sets the full command
        self.tracking = None  # emojikit.stages.tracking.Tracking while trackers watch the run
        if self.path.exists() and not self.path.is_dir():
            raise RunDirectoryError(f"{self.path}: is a file, expected a run directory; choose another name with --set name=<new> (or out=<dir>)")
        existing = self.path.exists() and any(p.name != ".lock" for p in self.path.iterdir())
        progress = existing and has_progress(self.path)
        if progress and not resume:
            raise RunDirectoryError(
                f"{self.path}: run directory already exists; pass --resume to continue it "
                f"or choose another name with --set name=<new>"
            )
        if resume and not existing:
            raise RunDirectoryError(f"{self.path}: nothing to resume (the run directory is empty or missing)")
        self._made_here = not self.path.exists()  # removed again if the run fails before it wrote anything of its own
        with writing(self.path, "creating the run directory"):
            self.path.mkdir(parents=True, exist_ok=True)
            self._lock()
        if progress and resume:
            try:
                if recipe_toml is not None and check_recipe:
                    check_same_recipe(self.path / "recipe.toml", recipe_toml)
                from emojikit.composition.preflight import check_resume

                check_resume(self)  # a damaged last checkpoint is named before any model loads
            except BaseException:
                self.close()
                raise
        if recipe_toml is not None:
            atomic_write_text(self.path / "recipe.toml", recipe_toml)

    def _lock(self) -> None:
        fd = os.open(self.path / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RunDirectoryError(f"{self.path}: run directory is in use by another emojikit process") from None
        self._lock_fd = fd

    def close(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> "RunDir":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()
        if exc_type is not None and issubclass(exc_type, EmojikitError) and self._made_here:
            self._remove_if_untouched()

    # A run that failed on bad input or a plugin's error before its first output (a component's
    # factory, a file read late) leaves no directory behind: only these would be in it.
    BOOKKEEPING = frozenset({".lock", "recipe.toml", "code.json", "stage.json"})

    def _remove_if_untouched(self) -> None:
        try:
            entries = list(self.path.iterdir())
            if all(p.is_file() and p.name in self.BOOKKEEPING for p in entries):
                for p in entries:
                    p.unlink()
                self.path.rmdir()
        except OSError:
            pass  # it stays, as it would have before

    # -- metrics ---------------------------------------------------------------------

    def file(self, name: str) -> Path:
        return self.path / name

    def log(self, name: str, row: dict) -> None:
        """Append one row to a JSONL file of the run (metrics.jsonl, episodes.jsonl, ...).
        The one place rows reach trackers: written here first, then handed on."""
        append_jsonl(self.path / name, row)
        if self.tracking is not None:
            self.tracking.on_row(name, row)

    def read(self, name: str) -> list[dict]:
        path = self.path / name
        if not path.exists():
            return []
        return list(read_jsonl(path, tolerate_torn_tail=True))

    def truncate(self, name: str, last_step: int) -> None:
        """Keep rows with step <= last_step (for resuming from a checkpoint at last_step)."""
        path = self.path / name
        if path.exists():
            atomic_write_jsonl(path, [r for r in self.read(name) if r.get("step", 0) <= last_step])

    # -- checkpoints -----------------------------------------------------------------

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    def checkpoint_path(self, step: int) -> Path:
        return self.checkpoints / f"step_{step}"

    @contextlib.contextmanager
    def new_checkpoint(self, step: int) -> Iterator[Path]:
        """Yield a temporary directory (io.atomic_directory); it is renamed to
        checkpoints/step_N once complete."""
        final = self.checkpoint_path(step)
        doing = f"saving checkpoint step_{step}; the earlier checkpoints are intact (free the space, then {self.resume_hint})"
        try:
            with atomic_directory(final, tmp_name=f".step_{step}.tmp") as tmp:
                yield tmp
        except OSError as exc:
            if os_problem(exc) is None:
                raise
            # A file of the temporary folder(s) is named as it would be in the checkpoint.
            failed = Path(exc.filename) if exc.filename else final
            if failed.parent == self.checkpoints:
                shown = final  # the folder itself (its temporary name, or the one moved aside)
            else:
                shown = final / failed.name if self.checkpoints in failed.parents else failed
            raise OutputError(f"{shown}: {os_problem(exc)} while {doing}") from None
        atomic_write_text(self.checkpoints / "latest.json", json.dumps({"step": step, "path": str(final)}) + "\n")

    def resume_policy(self, policy, logs: tuple[str, ...]) -> int:
        """On --resume: load the last complete checkpoint into policy and drop log rows written
        after it (those steps run again). Returns the step to continue from (0 for a new run)."""
        if not self.resume:
            return 0
        start = 0
        if latest := self.latest_checkpoint():
            start, path = latest
            policy.load(str(path))
            print(f"resuming from {path} (step {start})")
        for name in logs:
            self.truncate(name, start)
        return start

    def latest_checkpoint(self) -> Optional[tuple[int, Path]]:
        return latest_checkpoint(self.path)


def latest_checkpoint(run_dir: Path) -> Optional[tuple[int, Path]]:
    """(step, path) of the newest complete checkpoints/step_N of a run directory, or None;
    read without taking the run's lock."""
    checkpoints = Path(run_dir) / "checkpoints"
    if not checkpoints.is_dir():
        return None
    steps = [(int(m.group(1)), p) for p in checkpoints.iterdir() if (m := _STEP_DIR.match(p.name)) and p.is_dir()]
    return max(steps) if steps else None


NO_PROGRESS = ((".lock",), ("recipe.toml",), ("stage.json",), ("code.json",))  # files every started run has
TRACKER_FILES = "trackers"  # what trackers wrote: not the run's own progress


def has_progress(path: Path) -> bool:
    """True when a run directory holds work: a non-empty file beyond its lock, its recipe.toml,
    its stage record and the temporary folder of a checkpoint cut short. A directory holding no progress (a run that
    failed right after starting) may be started again without --resume."""
    for p in path.rglob("*"):
        rel = p.relative_to(path).parts
        if rel in NO_PROGRESS or rel[0] == TRACKER_FILES or any(part.startswith(".") and part.endswith(".tmp") for part in rel):
            continue
        if p.is_file() and p.stat().st_size > 0:
            return True
    return False


def _flatten(data: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _short(value: object) -> str:
    text = "(unset)" if value is _UNSET else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


_UNSET = object()


def recipe_differences(recorded_toml: str, new_toml: str) -> list[str]:
    """`key (recorded -> new)` for every key whose value differs between two resolved recipes."""
    import tomllib

    old, new = _flatten(tomllib.loads(recorded_toml)), _flatten(tomllib.loads(new_toml))
    keys = sorted(set(old) | set(new))
    return [f"{k} ({_short(old.get(k, _UNSET))} -> {_short(new.get(k, _UNSET))})" for k in keys if old.get(k, _UNSET) != new.get(k, _UNSET)]


# Keys that say how long a run goes or how fast this machine runs it, not what it computes:
# --resume may change them (extend a run by more steps), and says so.
RESUMABLE_CHANGES = ("sft.steps", "sft.epochs", "grpo.steps", "rft.rounds", "backend.threads")
RESUMABLE_PREFIXES = ("tracking.",)  # which trackers watch a run changes nothing it computes


def check_same_recipe(recorded: Path, recipe_toml: str) -> None:
    """--resume continues the run the directory records: a different recipe (kind, seed, any
    setting but RESUMABLE_CHANGES) is refused, naming the keys, and recipe.toml is never
    overwritten silently."""
    if not recorded.is_file():
        return
    try:
        differences = recipe_differences(recorded.read_text(encoding="utf-8"), recipe_toml)
    except (UnicodeDecodeError, ValueError):
        raise RunDirectoryError(f"{recorded}: not a readable recipe; the run directory is damaged (start a new run with --set name=<new>)") from None
    allowed = [d for d in differences if d.split(" ", 1)[0] in RESUMABLE_CHANGES or d.startswith(RESUMABLE_PREFIXES)]
    if allowed:
        import sys

        print(f"emojikit: resuming {recorded.parent} with {'; '.join(allowed)} (recipe.toml updated)", file=sys.stderr)
    differences = [d for d in differences if d not in allowed]
    if differences:
        shown = "; ".join(differences[:6]) + (f"; and {len(differences) - 6} more" if len(differences) > 6 else "")
        raise RunDirectoryError(
            f"{recorded.parent}: --resume with a recipe that differs from the run's recorded recipe.toml: {shown}; "
            f"resume with the recipe and --set values the run was started with, or start a new run with --set name=<new>"
        )


# --- checkpoint references: a run directory stands for its final checkpoint ---------------

# Files a saved checkpoint holds: adapter weights and config (local backend), the trainer
# state every backend writes, the pointer a remote backend (tinker) leaves.
CHECKPOINT_MARKERS = ("adapter_config.json", "adapter_model.safetensors", "trainer_state.json", "tinker.json")
# References that name no directory: the start model, a teacher, a remote state, a recipe.
NOT_A_PATH = ("base", "auto")


def is_checkpoint_dir(path: Path) -> bool:
    return path.is_dir() and any((path / name).exists() for name in CHECKPOINT_MARKERS)


def run_of_checkpoint(checkpoint) -> Optional[Path]:
    """The run directory a saved checkpoint belongs to (runs/x/checkpoints/step_N -> runs/x; a run
    directory stands for its final checkpoint, so runs/x -> runs/x), where its recipe.toml records
    how it was trained; None for "base", a teacher, a remote state or a checkpoint that is not in a
    run's checkpoints/ (a hand-made or exported one)."""
    ref = str(checkpoint)
    if ref in NOT_A_PATH or ref.startswith("teacher:") or "://" in ref:
        return None
    path = Path(ref)
    if path.parent.name == "checkpoints":
        return path.parent.parent
    return path if is_run_dir(path) and not is_checkpoint_dir(path) else None


def is_run_dir(path: Path) -> bool:
    return path.is_dir() and ((path / "checkpoints").is_dir() or (path / "stage.json").is_file() or (path / "recipe.toml").is_file())


def checkpoint_base_model(path: Path) -> Optional[str]:
    """The model a checkpoint was trained on, as its trainer_state.json records it (None if it does not)."""
    try:
        state = json.loads((Path(path) / "trainer_state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    model = state.get("model") if isinstance(state, dict) else None
    return model if isinstance(model, str) and model else None


def resolve_checkpoint(ref: str) -> str:
    """A checkpoint reference as a backend loads it. A run directory (runs/grpo) stands for its
    final checkpoint (checkpoints/step_N with the largest N); a checkpoint directory, "base",
    "auto", teacher:NAME, a recipe (.toml) or a remote path (tinker://...) is returned as is.
    Raises InputFileError (one line) for a path that is neither, e.g. a folder of runs."""
    ref = str(ref)
    if ref in NOT_A_PATH or ref.startswith("teacher:") or "://" in ref or ref.endswith(".toml"):
        return ref
    path = Path(ref)
    if not path.exists():
        raise InputFileError(f"{ref} is not a checkpoint directory (no such folder)")
    if not path.is_dir():
        raise InputFileError(f"{ref}: not a checkpoint directory but a file")
    if is_checkpoint_dir(path):
        return ref
    if is_run_dir(path):
        latest = latest_checkpoint(path)
        if latest is None:
            raise InputFileError(f"{ref}: a run directory without a checkpoint (no checkpoints/step_N yet)")
        return str(latest[1])
    runs_inside = sorted(p for p in path.iterdir() if p.is_dir() and latest_checkpoint(p) is not None)
    if runs_inside:
        shown = ", ".join(str(p) for p in runs_inside[:4]) + (", ..." if len(runs_inside) > 4 else "")
        raise InputFileError(f"{ref}: a folder of run directories, not a checkpoint; name one of them: {shown}")
    if not any(path.iterdir()):
        raise InputFileError(f"{ref}: an empty directory, not a checkpoint or run directory")
    return ref  # another backend's checkpoint format: its load() judges


def resolve_start(settings) -> Optional[str]:
    """The checkpoint a GRPO or RFT run starts from (its settings' start_from): None for "base",
    the sft_run's latest checkpoint (or None) for "auto", else the checkpoint as given. A recipe
    (.toml) is an error here: emojikit.stages.pipeline replaces it with that run's checkpoint."""
    if settings.start_from == "base":
        return None
    if settings.start_from.endswith(".toml"):
        from emojikit.play.targets import table_of

        raise ConfigError(f"[{table_of(settings)}] start_from: {settings.start_from} is a recipe; emojikit run resolves it to that run's checkpoint")
    if settings.start_from != "auto":
        return settings.start_from
    latest = latest_checkpoint(settings.sft_run)
    return str(latest[1]) if latest else None


def trained_senders(runs_root: Path = Path("runs")) -> list[Path]:
    """Final checkpoints of the sft and grpo runs under runs_root (a sender a person can chat
    with or play against), newest first."""
    found: list[Path] = []
    if not Path(runs_root).is_dir():
        return found
    for run in Path(runs_root).iterdir():
        if not run.is_dir() or (latest := latest_checkpoint(run)) is None:
            continue
        if run_kind(run) not in ("sft", "grpo", "rft"):
            continue
        found.append(latest[1])
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


def run_kind(run: Path) -> Optional[str]:
    """The recipe kind a run directory records (stage.json, else its recipe.toml)."""
    try:
        record = json.loads((run / "stage.json").read_text(encoding="utf-8"))
        if isinstance(record, dict) and isinstance(record.get("kind"), str):
            return record["kind"]
    except (OSError, ValueError):
        pass
    try:
        import tomllib

        kind = tomllib.loads((run / "recipe.toml").read_text(encoding="utf-8")).get("kind")
        return kind if isinstance(kind, str) else None
    except (OSError, ValueError):
        return None


# Run kinds whose run directories hold checkpoints (a sender), and what the others hold.
CHECKPOINT_RUN_KINDS = ("sft", "grpo", "rft")
RUN_HOLDS = {"data": "datasets (sft_train.jsonl, sft_test.jsonl, rl_prompts.jsonl, ...)", "eval": "reports (eval.md, eval.json, ...)"}


def not_a_sender_run(ref: str) -> Optional[str]:
    """Why `ref` is a run directory that can hold no checkpoint (a data or eval run), else None."""
    path = Path(ref)
    if not is_run_dir(path) or is_checkpoint_dir(path) or latest_checkpoint(path) is not None:
        return None
    kind = run_kind(path)
    if kind is None or kind in CHECKPOINT_RUN_KINDS:
        return None
    holds = RUN_HOLDS.get(kind, "no checkpoints")
    kinds = ", ".join(CHECKPOINT_RUN_KINDS[:-1]) + " and " + CHECKPOINT_RUN_KINDS[-1]
    article = "an" if kind in ("eval", "sft", "rft") else "a"  # as read: eval, es-ef-tee
    return f"{ref}: {article} {kind} run directory, not a training run: it holds {holds}, no checkpoint; checkpoints come from {kinds} runs, e.g. runs/sft or runs/grpo"


def sender_checkpoint(ref: str, flag: str = "--checkpoint", others: str = 'or "base"') -> str:
    """A sender reference given on the command line (`flag`), checked before any model loads:
    a data or eval run directory is named as such, a run directory means its final checkpoint,
    and that checkpoint's files must be intact (callers pass "base" on before this). One
    InputFileError line otherwise."""
    from emojikit.composition.preflight import check_checkpoint_files

    if (problem := not_a_sender_run(ref)) is not None:
        raise InputFileError(f"{flag} {problem}")
    try:
        checkpoint = resolve_checkpoint(ref)  # a run directory means its final checkpoint
    except InputFileError as exc:
        raise InputFileError(f"{flag} {exc}; give a checkpoint or run directory, {others}") from None
    check_checkpoint_files(checkpoint)  # a damaged file is named before any model loads
    return checkpoint
