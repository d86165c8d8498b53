"""Logprobs of datum targets under the policy: the trainer's side of `distribution`.

Positions inside a datum's `decoded_spans` are scored under the decoder mask, replayed over
the datum's own tokens, so they match what the sampler recorded.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from emojikit.policy import Datum
from emojikit_local.distribution import allowed_rows, tempered_logprobs


def right_pad(rows: Sequence[Sequence[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    tokens_B_T = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention_B_T = torch.zeros((len(rows), width), dtype=torch.long)
    for b, row in enumerate(rows):
        tokens_B_T[b, : len(row)] = torch.tensor(row, dtype=torch.long)
        attention_B_T[b, : len(row)] = 1
    return tokens_B_T.to(device), attention_B_T.to(device)


def replay_queries(datums: Sequence[Datum], constraint: Any, budget: int) -> tuple[list[int], list[int], list[Any], list[int]]:
    """(rows, positions, states, tokens_left) for every decoded position, in the order the
    sampler met them: the decoder restarts at each span and advances over the targets."""
    rows, positions, states, tokens_left = [], [], [], []
    for b, datum in enumerate(datums):
        for start, end in datum.decoded_spans:
            span_budget = max(datum.decode_budget or budget, end - start)
            state = constraint.start()
            for i in range(start, end):
                rows.append(b)
                positions.append(i)
                states.append(state)
                tokens_left.append(span_budget - (i - start))
                if i + 1 < end:
                    state = constraint.advance(state, datum.target_tokens[i])
    return rows, positions, states, tokens_left


def first_needed_position(datums: Sequence[Datum]) -> int:
    """The earliest position any datum weights or decodes: logits before it are not needed."""
    firsts = [next((i for i, w in enumerate(d.weights) if w != 0), len(d.weights)) for d in datums]
    firsts += [start for d in datums for start, _ in d.decoded_spans]
    return min(firsts, default=0)


def target_logprobs(model, datums: Sequence[Datum], *, temperature: float, constraint: Any, budget: int, pad_id: int, device, first_position: int = 0) -> torch.Tensor:
    """Float[B, T]: logprob of each target token (0 past a datum's end, and before
    first_position, where no logits are computed). Differentiable when called with grad."""
    inputs_B_T, attention_B_T = right_pad([d.model_input for d in datums], pad_id, device)
    targets_B_T, _ = right_pad([d.target_tokens for d in datums], pad_id, device)
    width = inputs_B_T.shape[1]
    first = min(first_position, width - 1)
    # The vocabulary projection is the largest activation; skip it where no loss falls (prompts).
    logits_B_K_V = model(input_ids=inputs_B_T, attention_mask=attention_B_T, use_cache=False, logits_to_keep=width - first if first else 0).logits
    kept_targets_B_K = targets_B_T[:, first:]
    logprobs_B_K = tempered_logprobs(logits_B_K_V, temperature).gather(-1, kept_targets_B_K[..., None]).squeeze(-1)
    if constraint is not None and any(d.decoded_spans for d in datums):
        rows, positions, states, tokens_left = replay_queries(datums, constraint, budget)
        allowed_N_V = allowed_rows(constraint, states, tokens_left, logits_B_K_V.shape[-1], device)
        rows_N = torch.tensor(rows, device=device)
        kept_N = torch.tensor(positions, device=device) - first
        masked_N_V = tempered_logprobs(logits_B_K_V[rows_N, kept_N], temperature, allowed_N_V)
        masked_N = masked_N_V.gather(-1, kept_targets_B_K[rows_N, kept_N][:, None]).squeeze(-1)
        logprobs_B_K = logprobs_B_K.index_put((rows_N, kept_N), masked_N)
    logprobs_B_T = torch.cat([logprobs_B_K.new_zeros(len(datums), first), logprobs_B_K], dim=1)
    return logprobs_B_T * attention_B_T
