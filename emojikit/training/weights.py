"""Per-token loss weights: how a batch's sampled or answer tokens share one step's loss."""

from __future__ import annotations


def loss_weights(per_episode: list[list], normalization: str, episode_budget: float) -> None:
    """Set each sampled token's loss weight for `normalization`, relative to "token".

    A backend averages the weighted per-token loss over the batch's tokens (local) or sums it
    (Tinker), so weights of 1 are "token". With N tokens in E episodes, an episode of T tokens
    gets N / (E * T) for "sequence" (its mean, then the mean over episodes) and every token
    N / (E * episode_budget) for "constant" (Dr. GRPO's sum over a fixed divisor); either way the
    backend's own scale stays that of "token", so the learning rate means the same."""
    if normalization == "token" or not per_episode:
        return
    counts = [sum(1 for d in datums for w in d.weights if w) for datums in per_episode]
    n_tokens, n_episodes = sum(counts), len(per_episode)
    for datums, count in zip(per_episode, counts):
        weight = n_tokens / (n_episodes * (count if normalization == "sequence" else episode_budget))
        for d in datums:
            d.weights = [weight if w else 0.0 for w in d.weights]
