"""Weights & Biases through the wandb SDK: online with WANDB_API_KEY, else offline (a run
folder under <run dir>/trackers/wandb that `wandb sync` uploads later). The key is read by
emojikit.require_key/find_key (environment or .env), handed to the SDK in memory and scrubbed
from every message; console capture, code saving and system statistics are off."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional

from pydantic import Field

from emojikit import ConfigModel, require_key
from emojikit.api.secrets import find_key
from emojikit_trackers.common import run_config

KEY = "WANDB_API_KEY"


class WandbConfig(ConfigModel):
    project: str = Field("emojikit", description="W&B project.")
    entity: Optional[str] = Field(None, description="W&B entity (team or user); default: the key's default entity.")
    mode: Literal["auto", "offline", "online"] = Field(
        "auto", description='"auto": online when WANDB_API_KEY is set, else offline; "offline": never uploads (wandb sync later); "online": needs the key.'
    )
    dir: Optional[Path] = Field(None, description="Where wandb keeps its run folders (default: <run dir>/trackers).")
    tags: list[str] = Field(default_factory=list, description="Tags of the W&B run.")


def preflight(config: WandbConfig, ctx) -> None:
    if config.mode == "online":
        require_key(KEY, "the wandb tracker in online mode")


class WandbTracker:
    def __init__(self, config: WandbConfig):
        self.config = config
        self.run = None
        self.offline_dir: Optional[Path] = None

    def start(self, run) -> str:
        import wandb
        from wandb.sdk.lib.runid import generate_id

        key = find_key(KEY) if self.config.mode != "offline" else None
        mode = "online" if key else "offline"
        settings = wandb.Settings(console="off", save_code=False, x_disable_stats=True, silent=True, **({"api_key": key} if key else {}))
        run_id = run.resume_id or generate_id()
        self.offline_dir = Path(self.config.dir or Path(run.run_dir) / "trackers") / "wandb" if mode == "offline" else None
        self.run = wandb.init(project=self.config.project, entity=self.config.entity, id=run_id, resume="allow", name=Path(run.run_dir).name,
                              job_type=run.kind, tags=self.config.tags or None, config=run_config(run),
                              dir=str(self.config.dir or Path(run.run_dir) / "trackers"), mode=mode, settings=settings, reinit="create_new")
        return run_id

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(dict(metrics), step=step)

    def log_table(self, name: str, columns: list[str], rows: list[list]) -> None:
        import wandb

        self.run.log({f"tables/{name}": wandb.Table(columns=columns, data=[[v if isinstance(v, (int, float, str, bool)) or v is None else str(v) for v in row] for row in rows])})

    def stored_step(self) -> Optional[int]:
        """The last history step of this run's offline folders, read by wandb's own reader
        (`wandb leet inspect`): wandb's service writes in blocks, and a kill -9 of the run takes
        the block it still held. None online (the server holds the history)."""
        import json
        import subprocess
        import sys

        if self.offline_dir is None:
            return None
        steps = [-1]
        for path in sorted(self.offline_dir.glob(f"offline-run-*-{self.run.id}/run-{self.run.id}.wandb")):
            out = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(path)], capture_output=True, text=True, timeout=300, check=True).stdout
            records = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
            steps += [int(r["history"]["step"]["num"]) for r in records if r.get("type") == "history"]
        return max(steps)

    def finish(self, status: str) -> None:
        if self.run is not None:
            self.run.finish(exit_code=0 if status == "finished" else 1)


def build(config: WandbConfig, ctx) -> WandbTracker:
    return WandbTracker(config)
