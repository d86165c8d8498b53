"""trackio: its local SQLite store (TRACKIO_DIR, default trackio's own under the Hugging Face
cache). Nothing here names a Space or a server, so trackio stays local; it reads TRACKIO_DIR
when first imported, so `store_dir` must be the one the process imported it with."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Optional

from pydantic import Field

from emojikit import ConfigError, ConfigModel
from emojikit_trackers.common import run_config


class TrackioConfig(ConfigModel):
    project: str = Field("emojikit", description="trackio project the runs go to.")
    store_dir: Optional[Path] = Field(None, description="trackio's local store (TRACKIO_DIR); default: TRACKIO_DIR, else trackio's own default.")


# trackio sends to a Space or a server when these are set; emojikit's tracker is local only.
REMOTE_VARIABLES = ("TRACKIO_SPACE_ID", "TRACKIO_SERVER_URL")


def preflight(config: TrackioConfig, ctx) -> None:
    remote = [v for v in REMOTE_VARIABLES if os.environ.get(v)]
    if remote:
        raise ConfigError(f"the trackio tracker writes to its local store only; unset {', '.join(remote)} (trackio would send the run elsewhere)")


class TrackioTracker:
    def __init__(self, config: TrackioConfig):
        self.config = config
        self.run = None
        self.name = ""
        self.last_step = 0
        self.stored: dict[str, set[int]] = {}  # on a resume: the steps the store holds, by key

    def _import(self):
        import sys

        wanted = str(self.config.store_dir.resolve()) if self.config.store_dir else None
        if wanted and "trackio" not in sys.modules:
            os.environ["TRACKIO_DIR"] = wanted
        import trackio

        if wanted and Path(trackio.TRACKIO_DIR).resolve() != Path(wanted):
            raise ConfigError(f"trackio was imported with its store at {trackio.TRACKIO_DIR} in this process; store_dir {wanted} cannot apply (set TRACKIO_DIR instead)")
        return trackio

    def start(self, run) -> str:
        trackio = self._import()
        # trackio names runs within a project: a new run gets the run directory's name and the time.
        self.name = run.resume_id or f"{Path(run.run_dir).name}-{time.strftime('%Y%m%d-%H%M%S')}"
        self.run = trackio.init(project=self.config.project, name=self.name, config=run_config(run), resume="allow" if run.resume_id else "never",
                                embed=False, auto_log_gpu=False, auto_log_cpu=False)
        self.last_step = run.resume_step or 0
        self.stored = self._stored_keys() if run.resume_id else {}
        return self.name

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        fresh = {key: value for key, value in metrics.items() if step not in self.stored.get(key, ())}
        if fresh:
            self.run.log(fresh, step=step)
        self.last_step = max(self.last_step, step)

    def log_table(self, name: str, columns: list[str], rows: list[list]) -> None:
        import trackio

        self.run.log({f"tables/{name}": trackio.Table(columns=columns, data=[[v if isinstance(v, (int, float, str, bool)) or v is None else str(v) for v in row] for row in rows])}, step=self.last_step)

    def finish(self, status: str) -> None:
        if self.run is not None:
            self.run.finish()  # flushes the rows its background thread still holds

    def _stored_keys(self) -> dict[str, set[int]]:
        from trackio.sqlite_storage import SQLiteStorage

        stored: dict[str, set[int]] = {}
        for row in SQLiteStorage.get_logs(self.config.project, self.name):
            if row.get("step") is not None:
                for key in row.keys() - {"step", "timestamp"}:
                    stored.setdefault(key, set()).add(int(row["step"]))
        return stored

    def stored_step(self) -> Optional[int]:
        """0 when the store holds rows of the run (-1: none): every row up to the checkpoint is
        offered again, and log_metrics skips the (key, step) pairs the store holds. trackio's
        background thread writes each log call as its own row, so a kill -9 can lose one step's
        metrics row and keep its held-out row, or lose a row while a later one was written: only
        the keys tell which rows are there (read once, by start)."""
        return 0 if self.stored else -1


def build(config: TrackioConfig, ctx) -> TrackioTracker:
    return TrackioTracker(config)
