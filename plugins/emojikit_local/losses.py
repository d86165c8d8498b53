"""Per-token losses, summed; the caller divides by the batch's weighted-token count.

A position's weight scales its term in every loss (as Tinker's RL losses see it, folded into
the advantage): GRPO's loss_normalization sets weights relative to 1 = per token.

Following Tinker: cross_entropy is -weight * logp; importance_sampling is
-(p / q) * advantage with q the sampler's probability; ppo clips the ratio p / q to
[1 - clip, 1 + clip] and takes the pessimistic (smaller) objective.
"""

from __future__ import annotations

import torch

LOSSES = ("cross_entropy", "importance_sampling", "ppo")


def loss_sum(loss: str, logprobs_N: torch.Tensor, weights_N: torch.Tensor, advantages_N: torch.Tensor, sampler_logprobs_N: torch.Tensor, clip: float) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """(summed loss, detached per-token statistics for metrics) over N loss positions."""
    if loss == "cross_entropy":
        return -(weights_N * logprobs_N).sum(), {}
    ratio_N = torch.exp(logprobs_N - sampler_logprobs_N)
    stats = {"ratio": ratio_N.detach(), "log_ratio": (logprobs_N - sampler_logprobs_N).detach()}
    if loss == "importance_sampling":
        return -(weights_N * ratio_N * advantages_N).sum(), stats
    if loss == "ppo":
        clipped_N = ratio_N.clamp(1.0 - clip, 1.0 + clip)
        objective_N = torch.minimum(ratio_N * advantages_N, clipped_N * advantages_N)
        stats["clipped"] = ((ratio_N * advantages_N) > (clipped_N * advantages_N)).detach()
        return -(weights_N * objective_N).sum(), stats
    raise ValueError(f"unknown loss {loss!r}; losses: {', '.join(LOSSES)}")
