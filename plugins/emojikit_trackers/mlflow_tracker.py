"""MLflow through MlflowClient: by default a local file store, `mlruns` next to the run
directories (runs/mlruns; `mlflow ui --backend-store-uri runs/mlruns`), or the tracking URI
given. MLflow 3 keeps its file store in maintenance mode behind MLFLOW_ALLOW_FILE_STORE, which
this tracker sets for the store it chooses itself: the file store needs no database set-up
(a new SQLite store spends some 20 s creating its tables)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Optional

from pydantic import Field

from emojikit import ConfigModel
from emojikit_trackers.common import run_config

STATUS = {"finished": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}
PARAM_LIMIT = 6000  # MLflow's longest parameter value


class MlflowConfig(ConfigModel):
    tracking_uri: Optional[str] = Field(None, description="MLflow tracking URI (file:, sqlite:, http://...); default: a file store at mlruns next to the run directory.")
    experiment: str = Field("emojikit", description="MLflow experiment the runs go to.")


def _params(data: dict, prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(_params(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = str(value)[:PARAM_LIMIT]
    return out


class MlflowTracker:
    def __init__(self, config: MlflowConfig):
        self.config = config
        self.client = None
        self.run_id = ""
        self._stored: dict[str, set[int]] = {}  # key -> steps the store held when the run resumed

    def start(self, run) -> str:
        uri = self.config.tracking_uri
        if uri is None:
            uri = (Path(run.run_dir).resolve().parent / "mlruns").as_uri()
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=uri)
        experiment = self.client.get_experiment_by_name(self.config.experiment)
        experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(self.config.experiment)
        if run.resume_id:
            self.run_id = run.resume_id
            self.client.update_run(self.run_id, status="RUNNING")
            return self.run_id
        created = self.client.create_run(experiment_id, run_name=Path(run.run_dir).name, tags={"emojikit.kind": run.kind, "emojikit.run_dir": str(run.run_dir)})
        self.run_id = created.info.run_id
        config = run_config(run)
        params = _params({k: v for k, v in config.items() if k != "code"})
        items = [Param(k, v) for k, v in params.items()]
        for i in range(0, len(items), 100):  # MLflow's limit of parameters per batch
            self.client.log_batch(self.run_id, params=items[i : i + 100])
        self.client.log_dict(self.run_id, config, "recipe.json")
        return self.run_id

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        fresh = [Metric(key, value, now, step) for key, value in metrics.items() if step not in self._stored.get(key, ())]
        if fresh:
            self.client.log_batch(self.run_id, metrics=fresh)

    def log_table(self, name: str, columns: list[str], rows: list[list]) -> None:
        data = {c: [row[i] if isinstance(row[i], (int, float, str, bool)) or row[i] is None else str(row[i]) for row in rows] for i, c in enumerate(columns)}
        self.client.log_table(self.run_id, data=data, artifact_file=f"tables/{name}.json")

    def finish(self, status: str) -> None:
        if self.client is not None and self.run_id:
            self.client.set_terminated(self.run_id, status=STATUS.get(status, "FAILED"))

    def stored_step(self) -> Optional[int]:
        """The last step every stored key reaches (-1: none). A file store writes a batch key by
        key, so a kill -9 can leave a step with some keys only; steps after this one are sent
        again, and log_metrics skips the (key, step) pairs the store already holds."""
        keys = self.client.get_run(self.run_id).data.metrics
        self._stored = {key: {m.step for m in self.client.get_metric_history(self.run_id, key)} for key in keys}
        reached = [max(steps) for steps in self._stored.values() if steps]
        return min(reached) if reached else -1


def build(config: MlflowConfig, ctx) -> MlflowTracker:
    return MlflowTracker(config)
