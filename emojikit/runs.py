"""Run directories: resolved recipe, metrics, checkpoints, resume, and a lock.

Layout of runs/<name>/:
  recipe.toml        the resolved recipe, secrets redacted
  metrics.jsonl      one JSON object per step, appended atomically (single write + fsync)
  checkpoints/step_N a checkpoint appears under its final name only once complete
  .lock              held (flock) while a process uses the directory
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
from pathlib import Path
from typing import Iterator, Optional

from emojikit.errors import RunDirectoryError
from emojikit.io import append_jsonl, atomic_write_jsonl, atomic_write_text, read_jsonl

_STEP_DIR = re.compile(r"^step_(\d+)$")


class RunDir:
    def __init__(self, path: Path | str, *, resume: bool = False, recipe_toml: Optional[str] = None):
        self.path = Path(path)
        self.resume = resume
        self._lock_fd: Optional[int] = None
        existing = self.path.exists() and any(p.name != ".lock" for p in self.path.iterdir())
        if existing and not resume:
            raise RunDirectoryError(
                f"{self.path}: run directory already exists; pass --resume to continue it "
                f"or choose another name with --set name=<new>"
            )
        if resume and not existing:
            raise RunDirectoryError(f"{self.path}: nothing to resume (the run directory is empty or missing)")
        self.path.mkdir(parents=True, exist_ok=True)
        self._lock()
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

    def __exit__(self, *exc) -> None:
        self.close()

    # -- metrics ---------------------------------------------------------------------

    def file(self, name: str) -> Path:
        return self.path / name

    def log(self, name: str, row: dict) -> None:
        """Append one row to a JSONL file of the run (metrics.jsonl, episodes.jsonl, ...)."""
        append_jsonl(self.path / name, row)

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
        """Yield a temporary directory; it is renamed to checkpoints/step_N once complete."""
        final = self.checkpoint_path(step)
        tmp = self.checkpoints / f".step_{step}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        try:
            yield tmp
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
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
        if not self.checkpoints.exists():
            return None
        steps = [(int(m.group(1)), p) for p in self.checkpoints.iterdir() if (m := _STEP_DIR.match(p.name)) and p.is_dir()]
        return max(steps) if steps else None
