"""Registers the built-in trackers. Nothing heavy is imported here: each tracker's library
loads when a run starts it, and a missing one is a one-line preflight error naming its extra."""

from emojikit import Component, hookimpl
from emojikit_trackers import mlflow_tracker, tensorboard_tracker, trackio_tracker, wandb_tracker
from emojikit_trackers.common import library_check


def _both(*checks):
    def preflight(config, ctx):
        for check in checks:
            check(config, ctx)

    return preflight


@hookimpl
def register_trackers():
    return [
        Component(
            name="tensorboard",
            summary="TensorBoard event files in <run dir>/trackers/tensorboard: a scalar series per metric, tables as text",
            config=tensorboard_tracker.TensorBoardConfig,
            factory=tensorboard_tracker.build,
            preflight=library_check("tensorboard", "tensorboard", "tensorboard"),
        ),
        Component(
            name="trackio",
            summary="trackio's local store (TRACKIO_DIR): metrics, config and tables; `trackio show` to browse",
            config=trackio_tracker.TrackioConfig,
            factory=trackio_tracker.build,
            preflight=_both(library_check("trackio", "trackio", "trackio"), trackio_tracker.preflight),
        ),
        Component(
            name="wandb",
            summary="Weights & Biases: online with WANDB_API_KEY, else offline in <run dir>/trackers/wandb (wandb sync later)",
            config=wandb_tracker.WandbConfig,
            factory=wandb_tracker.build,
            preflight=_both(library_check("wandb", "wandb", "wandb"), wandb_tracker.preflight),
            optional_key=wandb_tracker.KEY,
        ),
        Component(
            name="mlflow",
            summary="MLflow: a local file store (runs/mlruns) by default, or a tracking URI",
            config=mlflow_tracker.MlflowConfig,
            factory=mlflow_tracker.build,
            preflight=library_check("mlflow", "mlflow", "mlflow"),
        ),
    ]
