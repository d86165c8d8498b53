"""Logprobs of datum targets under the policy: the trainer's side of `distribution`.

Positions inside a datum's `decoded_spans` are scored under the decoder mask, replayed over
the datum's own tokens, so they match what the sampler recorded.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from emojikit.policy import Datum
from emojikit_local.distribution import allowed_rows, tempered_logprobs

# Below this many shared tokens the extra cache copy costs more than the prefix pass saves.
MIN_COMMON_PREFIX = 4


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


def needed_from(datum: Datum) -> int:
    """The first position this datum weights or decodes: no logits are needed before it."""
    first = next((i for i, w in enumerate(datum.weights) if w != 0), len(datum.weights))
    return min([first] + [start for start, _ in datum.decoded_spans])


def first_needed_position(datums: Sequence[Datum]) -> int:
    """The earliest position any datum weights or decodes: logits before it are not needed."""
    return min((needed_from(d) for d in datums), default=0)


def prefix_split(datum: Datum) -> int:
    """Where a datum splits into a shared prefix (positions whose logits are not needed: the
    prompt) and its own suffix; at least one token stays in the suffix."""
    return min(needed_from(datum), len(datum.model_input) - 1)


def prefix_key(datum: Datum) -> tuple[int, ...]:
    return tuple(datum.model_input[: prefix_split(datum)])


def common_prefix_length(prefixes: Sequence[Sequence[int]]) -> int:
    """How many leading tokens all prefixes share (in SFT batches: the chat template and system
    prompt, ~a third of each short example)."""
    shortest = min(len(p) for p in prefixes)
    for i in range(shortest):
        token = prefixes[0][i]
        if any(p[i] != token for p in prefixes):
            return i
    return shortest


def target_logprobs(model, datums: Sequence[Datum], *, temperature: float, constraint: Any, budget: int, pad_id: int, device, first_position: int = 0, share_prefix: bool = False) -> torch.Tensor:
    """Float[B, T]: logprob of each target token (0 past a datum's end, and before
    first_position, where no logits are computed). Differentiable when called with grad.

    share_prefix=True runs each distinct prefix (the prompt before the first weighted or
    decoded position) once, copies its KV cache to the datums that share it (the samples of
    one GRPO group) and runs only their suffixes; positions before a datum's own split are 0.
    When every prompt differs, the tokens they all start with (chat template, system prompt)
    are run once instead. Gradients flow back through the copies into the one prefix pass.
    """
    if share_prefix and len(datums) > 1:
        splits = [prefix_split(d) for d in datums]
        prefixes = [tuple(d.model_input[:s]) for d, s in zip(datums, splits)]
        if min(splits) > 0 and len(set(prefixes)) < len(datums):
            return _shared_prefix_logprobs(model, datums, splits, temperature=temperature, constraint=constraint, budget=budget, pad_id=pad_id, device=device)
        common = common_prefix_length(prefixes)
        if common >= MIN_COMMON_PREFIX:
            return _shared_prefix_logprobs(model, datums, [common] * len(datums), temperature=temperature, constraint=constraint, budget=budget, pad_id=pad_id, device=device)
    inputs_B_T, attention_B_T = right_pad([d.model_input for d in datums], pad_id, device)
    targets_B_T, _ = right_pad([d.target_tokens for d in datums], pad_id, device)
    width = inputs_B_T.shape[1]
    first = min(first_position, width - 1)
    # The vocabulary projection is the largest activation; skip it where no loss falls (prompts).
    logits_B_K_V = model(input_ids=inputs_B_T, attention_mask=attention_B_T, use_cache=False, logits_to_keep=width - first if first else 0).logits
    logprobs_B_K = _masked_logprobs(logits_B_K_V, targets_B_T[:, first:], datums, [first] * len(datums), temperature, constraint, budget, device)
    logprobs_B_T = torch.cat([logprobs_B_K.new_zeros(len(datums), first), logprobs_B_K], dim=1)
    return logprobs_B_T * attention_B_T


def _masked_logprobs(logits_B_K_V, targets_B_K, datums, offsets: list[int], temperature, constraint, budget, device) -> torch.Tensor:
    """Float[B, K]: tempered logprob of each target, under the decoder mask at decoded
    positions; column k of row b is position offsets[b] + k."""
    logprobs_B_K = tempered_logprobs(logits_B_K_V, temperature).gather(-1, targets_B_K[..., None]).squeeze(-1)
    if constraint is not None and any(d.decoded_spans for d in datums):
        rows, positions, states, tokens_left = replay_queries(datums, constraint, budget)
        allowed_N_V = allowed_rows(constraint, states, tokens_left, logits_B_K_V.shape[-1], device)
        rows_N = torch.tensor(rows, device=device)
        kept_N = torch.tensor([p - offsets[r] for r, p in zip(rows, positions)], device=device)
        masked_N_V = tempered_logprobs(logits_B_K_V[rows_N, kept_N], temperature, allowed_N_V)
        masked_N = masked_N_V.gather(-1, targets_B_K[rows_N, kept_N][:, None]).squeeze(-1)
        logprobs_B_K = logprobs_B_K.index_put((rows_N, kept_N), masked_N)
    return logprobs_B_K


def _shared_prefix_logprobs(model, datums: Sequence[Datum], splits: list[int], *, temperature, constraint, budget, pad_id, device) -> torch.Tensor:
    from emojikit_local.sampling import left_pad, unique_rows

    prefixes, row_to_unique = unique_rows([d.model_input[:s] for d, s in zip(datums, splits)])
    prefix_U_P, prefix_attention_U_P = left_pad(prefixes, pad_id, device)
    positions_U_P = (prefix_attention_U_P.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=prefix_U_P, attention_mask=prefix_attention_U_P, position_ids=positions_U_P, use_cache=True, logits_to_keep=1)
    expand_B = torch.tensor(row_to_unique, device=device)
    cache = out.past_key_values
    cache.reorder_cache(expand_B)  # differentiable index_select: gradients sum back into the prefix

    suffix_B_S, suffix_attention_B_S = right_pad([d.model_input[s:] for d, s in zip(datums, splits)], pad_id, device)
    targets_B_S, _ = right_pad([d.target_tokens[s:] for d, s in zip(datums, splits)], pad_id, device)
    splits_B = torch.tensor(splits, device=device)
    width_S = suffix_B_S.shape[1]
    positions_B_S = splits_B[:, None] + torch.arange(width_S, device=device)[None, :]
    attention_B_PS = torch.cat([prefix_attention_U_P.index_select(0, expand_B), suffix_attention_B_S], dim=1)
    # Suffix columns before `skip` are prompt in every row (a common-prefix split): no logits.
    skip = min(max(0, min(needed_from(d) - s for d, s in zip(datums, splits))), width_S - 1)
    logits_B_K_V = model(input_ids=suffix_B_S, attention_mask=attention_B_PS, position_ids=positions_B_S, past_key_values=cache, use_cache=True, logits_to_keep=width_S - skip if skip else 0).logits
    offsets = [s + skip for s in splits]
    logprobs_B_K = _masked_logprobs(logits_B_K_V, targets_B_S[:, skip:], datums, offsets, temperature, constraint, budget, device) * suffix_attention_B_S[:, skip:]
    width = max(len(d.target_tokens) for d in datums)
    rows = []
    for b, (datum, offset) in enumerate(zip(datums, offsets)):
        n = len(datum.target_tokens) - offset
        rows.append(torch.cat([logprobs_B_K.new_zeros(offset), logprobs_B_K[b, :n], logprobs_B_K.new_zeros(width - offset - n)]))
    return torch.stack(rows)
