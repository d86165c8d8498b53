"""The next-token distribution the sampler draws from and the trainer scores under.

Both paths go through `tempered_logprobs`, so a token's logprob is the same number whether it
was recorded while sampling or recomputed for training: logits / temperature, tokens the
decoder forbids set to -inf, then log_softmax. top_p only narrows what is drawn; the recorded
logprob stays the one under the full masked, tempered distribution.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import torch


def effective_temperature(temperature: float) -> float:
    """Greedy decoding (temperature 0) records and scores logprobs at temperature 1."""
    return temperature if temperature > 0 else 1.0


def allowed_rows(constraint: Any, states: Sequence[Any], tokens_left: Sequence[int], vocab_size: int, device) -> torch.Tensor:
    """Bool[N, V]: the tokens the decoder allows in each (state, tokens_left).

    Uses the constraint's batched `allowed_batch` when it has one. The mask is cut or padded
    (with False) to the model's vocabulary, which may be wider than the tokenizer's.
    """
    if hasattr(constraint, "allowed_batch"):
        allowed_N_W = torch.as_tensor(constraint.allowed_batch(list(states), list(tokens_left)))
    else:
        allowed_N_W = torch.stack([torch.as_tensor(constraint.allowed(s, k)) for s, k in zip(states, tokens_left)])
    allowed_N_W = allowed_N_W.to(device=device, dtype=torch.bool)
    width = allowed_N_W.shape[-1]
    if width > vocab_size:
        return allowed_N_W[:, :vocab_size]
    if width < vocab_size:
        pad_N_P = torch.zeros(allowed_N_W.shape[0], vocab_size - width, dtype=torch.bool, device=device)
        return torch.cat([allowed_N_W, pad_N_P], dim=-1)
    return allowed_N_W


def tempered_logprobs(logits_N_V: torch.Tensor, temperature: float, allowed_N_V: Optional[torch.Tensor] = None) -> torch.Tensor:
    """log_softmax(logits / temperature) over the allowed tokens (float32)."""
    scaled_N_V = logits_N_V.float() / effective_temperature(temperature)
    if allowed_N_V is not None:
        scaled_N_V = scaled_N_V.masked_fill(~allowed_N_V, float("-inf"))
    return torch.log_softmax(scaled_N_V, dim=-1)


class _TargetLogprob(torch.autograd.Function):
    """tempered_logprobs(logits, temperature, allowed).gather(targets), fused: the forward keeps
    only the logits it was given and a logsumexp per row, and the backward recomputes the
    softmax once, instead of autograd keeping and walking the scaled copy, the masked copy, the
    [N, V] log-softmax and the zero-filled scatter of the gather (~1/8 of an SFT step's time)."""

    @staticmethod
    def forward(ctx, logits_N_V, targets_N, temperature, allowed_N_V):
        scaled_N_V = _scaled(logits_N_V, temperature, allowed_N_V)
        lse_N = torch.logsumexp(scaled_N_V, dim=-1)
        ctx.save_for_backward(logits_N_V, targets_N, lse_N, allowed_N_V)
        ctx.temperature = temperature
        return scaled_N_V.gather(-1, targets_N[:, None]).squeeze(-1) - lse_N

    @staticmethod
    def backward(ctx, grad_N):
        logits_N_V, targets_N, lse_N, allowed_N_V = ctx.saved_tensors
        # d/dx (x_t - logsumexp(x)) = onehot(t) - softmax(x); forbidden tokens have softmax 0
        grad_N_V = (_scaled(logits_N_V, ctx.temperature, allowed_N_V) - lse_N[:, None]).exp_().mul_(-grad_N[:, None])
        grad_N_V.scatter_add_(-1, targets_N[:, None], grad_N[:, None])
        if effective_temperature(ctx.temperature) != 1.0:
            grad_N_V.div_(effective_temperature(ctx.temperature))
        return grad_N_V.to(logits_N_V.dtype), None, None, None


def _scaled(logits_N_V: torch.Tensor, temperature: float, allowed_N_V: Optional[torch.Tensor]) -> torch.Tensor:
    scaled_N_V = logits_N_V.float()
    if effective_temperature(temperature) != 1.0:
        scaled_N_V = scaled_N_V / effective_temperature(temperature)
    if allowed_N_V is not None:
        scaled_N_V = scaled_N_V.masked_fill(~allowed_N_V, float("-inf"))
    return scaled_N_V


def target_logprobs_of(logits_N_V: torch.Tensor, targets_N: torch.Tensor, temperature: float, allowed_N_V: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Float[N]: the logprob of each row's target under `tempered_logprobs(logits_N_V,
    temperature, allowed_N_V)` (float32), differentiable with respect to the logits."""
    return _TargetLogprob.apply(logits_N_V, targets_N, temperature, allowed_N_V)


def draw(logprobs_N_V: torch.Tensor, temperature: float, top_p: float, generator: Optional[torch.Generator]) -> torch.Tensor:
    """One token per row: argmax at temperature 0, else a draw from the top_p nucleus.

    Inverse-CDF sampling: one uniform number per row against the cumulative probabilities.
    (torch.multinomial draws an exponential variate for every vocabulary entry, ~35 ms per
    step for 32 x 49k on one CPU core; this needs N variates.) A token of probability 0 never
    comes out: its cumulative value equals its predecessor's, so the search stops earlier.
    """
    if temperature <= 0:
        return logprobs_N_V.argmax(dim=-1)
    probs_N_V = logprobs_N_V.exp()
    if top_p < 1.0:
        sorted_N_V, order_N_V = probs_N_V.sort(dim=-1, descending=True)
        # keep a token while the mass before it is below top_p (the first token always stays)
        drop_N_V = (sorted_N_V.cumsum(dim=-1) - sorted_N_V) >= top_p
        sorted_N_V = sorted_N_V.masked_fill(drop_N_V, 0.0)
        probs_N_V = torch.zeros_like(probs_N_V).scatter(-1, order_N_V, sorted_N_V)
    cdf_N_V = probs_N_V.double().cumsum(dim=-1)
    u_N = torch.rand(cdf_N_V.shape[0], generator=generator, device=cdf_N_V.device, dtype=torch.float64) * cdf_N_V[:, -1]
    token_N = torch.searchsorted(cdf_N_V, u_N[:, None], right=True).squeeze(-1)
    # u == total can only happen through rounding (the search then runs past the last token
    # with mass): take that token instead; found only for such rows, not a pass over every row
    over_N = token_N >= probs_N_V.shape[-1]
    if bool(over_N.any()):
        last_M = (probs_N_V[over_N] > 0).cumsum(dim=-1).argmax(dim=-1)
        token_N = token_N.masked_scatter(over_N, last_M)
    return token_N
