"""TensorBoard: event files through torch.utils.tensorboard's SummaryWriter (needs the tensorboard
library). One scalar series per metric key; the config, the code record and the tables as text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from pydantic import Field

from emojikit import ConfigModel
from emojikit_trackers.common import markdown_table, run_config


class TensorBoardConfig(ConfigModel):
    log_dir: Optional[Path] = Field(
        None, description="Where the event files go (default: <run dir>/trackers/tensorboard; `tensorboard --logdir runs` shows every run)."
    )


class TensorBoardTracker:
    def __init__(self, config: TensorBoardConfig):
        self.config = config
        self.writer = None
        self.last_step = 0

    def start(self, run) -> str:
        from torch.utils.tensorboard import SummaryWriter

        log_dir = self.config.log_dir or Path(run.run_dir) / "trackers" / "tensorboard"
        # On a resume, readers drop the events of steps after the last one emojikit recorded as
        # sent (a kill -9 may have come between the write and the record): none shows twice.
        purge = run.resume_step + 1 if run.resume_step is not None else None
        self.writer = SummaryWriter(str(log_dir), purge_step=purge)
        self.last_step = run.resume_step or 0
        if run.resume_id is None:
            self.writer.add_text("config", "```\n" + json.dumps(run_config(run), indent=2, ensure_ascii=False) + "\n```", 0)
            self.writer.flush()
        return str(log_dir)

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()  # written through: a kill -9 after this loses nothing
        self.last_step = max(self.last_step, step)

    def log_table(self, name: str, columns: list[str], rows: list[list]) -> None:
        self.writer.add_text(f"tables/{name}", markdown_table(columns, rows), self.last_step)
        self.writer.flush()

    def finish(self, status: str) -> None:
        if self.writer is not None:
            self.writer.close()


def build(config: TensorBoardConfig, ctx) -> TensorBoardTracker:
    return TensorBoardTracker(config)
