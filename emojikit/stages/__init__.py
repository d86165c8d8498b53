"""Runs and stages: run directories, checkpoints and resume, recipe chains and fingerprints,
interruption."""
