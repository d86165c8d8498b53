"""Built-in trackers: TensorBoard, trackio, Weights & Biases and MLflow, each through its own
library (an optional extra per tracker). docs/trackers.md describes what each receives."""
