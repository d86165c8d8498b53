"""Evaluation: held-out games for several senders, comparisons, game figures, seed sweeps and
people's games."""
