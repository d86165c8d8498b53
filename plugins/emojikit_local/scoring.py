"""Logprobs of datum targets under the policy: the trainer's side of `distribution`.

Positions inside a datum's `decoded_spans` are scored under the decoder mask, replayed over
the datum's own tokens, so they match what the sampler recorded.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from emojikit.api.policy import Datum
from emojikit_local.distribution import allowed_rows, target_logprobs_of
from emojikit_local.head import allowed_columns, decoder_of, project
from emojikit_local.sampling import MIN_COMMON_PREFIX, cache_argument, common_prefix_length, left_pad, returned_cache, unique_rows


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
    sampler met them: the decoder restarts at each span and advances over the targets. The
    token budget is the datum's decode_budget; `budget` only stands in for a datum without one."""
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


def target_logprobs(model, datums: Sequence[Datum], *, temperature: float, constraint: Any, budget: int, pad_id: int, device, first_position: int = 0, share_prefix: bool = False, weighted_only: bool = False, pack: bool = False) -> torch.Tensor:
    """Float[B, T]: logprob of each target token (0 past a datum's end, and before
    first_position, where no logits are computed). Differentiable when called with grad.

    share_prefix=True runs each distinct prefix (the prompt before the first weighted or
    decoded position) once, copies its KV cache to the datums that share it (the samples of
    one GRPO group) and runs only their suffixes; positions before a datum's own split are 0.
    When every prompt differs, the tokens they all start with (chat template, system prompt)
    are run once instead. Gradients flow back through the copies into the one prefix pass.

    weighted_only=True scores only positions with a non-zero weight (the rest are 0): training
    needs no others, and the vocabulary projection is then paid for the answer tokens alone.

    pack=True (with share_prefix) runs suffixes of one prefix side by side in a row where they
    fit (pack_rows), each seeing only its prefix and itself: the same logprobs, fewer padded rows.
    """
    if share_prefix and len(datums) > 1:
        splits = [prefix_split(d) for d in datums]
        prefixes = [tuple(d.model_input[:s]) for d, s in zip(datums, splits)]
        if min(splits) > 0 and len(set(prefixes)) < len(datums):
            return _shared_prefix_logprobs(model, datums, splits, temperature=temperature, constraint=constraint, budget=budget, pad_id=pad_id, device=device, weighted_only=weighted_only, pack=pack)
        common = common_prefix_length(prefixes)
        if common >= MIN_COMMON_PREFIX:
            return _shared_prefix_logprobs(model, datums, [common] * len(datums), temperature=temperature, constraint=constraint, budget=budget, pad_id=pad_id, device=device, weighted_only=weighted_only, pack=pack)
    inputs_B_T, attention_B_T = right_pad([d.model_input for d in datums], pad_id, device)
    targets_B_T, _ = right_pad([d.target_tokens for d in datums], pad_id, device)
    width = inputs_B_T.shape[1]
    first = min(first_position, width - 1)
    hidden_B_T_D = decoder_of(model)(input_ids=inputs_B_T, attention_mask=attention_B_T, use_cache=False).last_hidden_state
    offsets = [first] * len(datums)
    needed_B_K = _needed(datums, offsets, attention_B_T[:, first:], weighted_only)
    logprobs_B_K = _scored_logprobs(model, hidden_B_T_D[:, first:], targets_B_T[:, first:], needed_B_K, datums, offsets, temperature, constraint, budget, device)
    return torch.cat([logprobs_B_K.new_zeros(len(datums), first), logprobs_B_K], dim=1)


def _needed(datums: Sequence[Datum], offsets: list[int], attention_B_K: torch.Tensor, weighted_only: bool) -> torch.Tensor:
    """Bool[B, K]: the columns to score; column k of row b is position offsets[b] + k."""
    needed_B_K = attention_B_K.bool()
    if weighted_only:
        width = needed_B_K.shape[1]
        rows = [[w != 0 for w in d.weights[o : o + width]] for d, o in zip(datums, offsets)]
        weighted_B_K = torch.tensor([row + [False] * (width - len(row)) for row in rows], dtype=torch.bool, device=needed_B_K.device)
        needed_B_K &= weighted_B_K
    return needed_B_K


def _scored_logprobs(model, hidden_B_K_D, targets_B_K, needed_B_K, datums, offsets: list[int], temperature, constraint, budget, device) -> torch.Tensor:
    """Float[B, K]: tempered logprob of each needed target (0 elsewhere), under the decoder mask
    at decoded positions; column k of row b is position offsets[b] + k. The vocabulary
    projection, the largest activation, runs on the needed rows only, and when every needed row
    is a decoded position, on the tokens the mask allows in them only (head.py)."""
    rows_N, cols_N = needed_B_K.nonzero(as_tuple=True)
    hidden_N_D = hidden_B_K_D[rows_N, cols_N]
    targets_N = targets_B_K[rows_N, cols_N]
    allowed_N_V = None
    if constraint is not None and any(d.decoded_spans for d in datums):
        vocab_size = model.get_output_embeddings().weight.shape[0]
        index_B_K = torch.full(needed_B_K.shape, -1, dtype=torch.long, device=device)
        index_B_K[rows_N, cols_N] = torch.arange(len(rows_N), device=device)
        rows, positions, states, tokens_left = replay_queries(datums, constraint, budget)
        # Decoded positions lie inside the scored window; weighted_only drops unweighted ones.
        index_Q = index_B_K[torch.tensor(rows, device=device), torch.tensor([p - offsets[r] for r, p in zip(rows, positions)], device=device)]
        keep = (index_Q >= 0).nonzero().squeeze(-1).tolist()
        if keep:
            # rows outside the decoded spans allow every token
            allowed_N_V = torch.ones((len(rows_N), vocab_size), dtype=torch.bool, device=device)
            allowed_N_V[index_Q[keep]] = allowed_rows(constraint, [states[i] for i in keep], [tokens_left[i] for i in keep], vocab_size, device)
    # every row masked: the head over the columns the mask allows in some row only
    columns_K = allowed_columns(allowed_N_V, targets_N) if allowed_N_V is not None and len(keep) == len(rows_N) else None
    if columns_K is None:
        logprobs_N = target_logprobs_of(project(model, hidden_N_D), targets_N, temperature, allowed_N_V)
    else:
        logits_N_K = project(model, hidden_N_D, columns_K)
        logprobs_N = target_logprobs_of(logits_N_K, torch.searchsorted(columns_K, targets_N), temperature, allowed_N_V[:, columns_K])
    return logprobs_N.new_zeros(needed_B_K.shape).index_put((rows_N, cols_N), logprobs_N)


def _shared_prefix_logprobs(model, datums: Sequence[Datum], splits: list[int], *, temperature, constraint, budget, pad_id, device, weighted_only: bool, pack: bool = False) -> torch.Tensor:
    decoder = decoder_of(model)
    prefixes, row_to_unique = unique_rows([d.model_input[:s] for d, s in zip(datums, splits)])
    prefix_U_P, prefix_attention_U_P = left_pad(prefixes, pad_id, device)
    positions_U_P = (prefix_attention_U_P.cumsum(-1) - 1).clamp(min=0)
    out = decoder(input_ids=prefix_U_P, attention_mask=prefix_attention_U_P, position_ids=positions_U_P, use_cache=True)
    cache = returned_cache(out)
    suffixes = [d.model_input[s:] for d, s in zip(datums, splits)]
    suffix_B_S, suffix_attention_B_S = right_pad(suffixes, pad_id, device)
    targets_B_S, _ = right_pad([d.target_tokens[s:] for d, s in zip(datums, splits)], pad_id, device)
    width_S = suffix_B_S.shape[1]
    # Suffix columns before `skip` are prompt in every row (a common-prefix split): no logits.
    skip = min(max(0, min(needed_from(d) - s for d, s in zip(datums, splits))), width_S - 1)
    packed, width_W = packing([len(x) for x in suffixes], row_to_unique) if pack and packable(model, prefix_U_P.shape[1] + 2 * width_S) else (None, width_S)
    if packed is not None and len(packed) < len(datums):
        hidden_B_S_D = _packed_suffixes(model, decoder, cache, packed, suffixes, splits, row_to_unique, prefix_attention_U_P, width_W, width_S, pad_id, device)
    else:
        expand_B = torch.tensor(row_to_unique, device=device)
        cache.reorder_cache(expand_B)  # differentiable index_select: gradients sum back into the prefix
        splits_B = torch.tensor(splits, device=device)
        positions_B_S = splits_B[:, None] + torch.arange(width_S, device=device)[None, :]
        attention_B_PS = torch.cat([prefix_attention_U_P.index_select(0, expand_B), suffix_attention_B_S], dim=1)
        hidden_B_S_D = decoder(input_ids=suffix_B_S, attention_mask=attention_B_PS, position_ids=positions_B_S, use_cache=True, **{cache_argument(model): cache}).last_hidden_state
    offsets = [s + skip for s in splits]
    needed_B_K = _needed(datums, offsets, suffix_attention_B_S[:, skip:], weighted_only)
    logprobs_B_K = _scored_logprobs(model, hidden_B_S_D[:, skip:], targets_B_S[:, skip:], needed_B_K, datums, offsets, temperature, constraint, budget, device)
    width = max(len(d.target_tokens) for d in datums)
    rows = []
    for b, (datum, offset) in enumerate(zip(datums, offsets)):
        n = len(datum.target_tokens) - offset
        rows.append(torch.cat([logprobs_B_K.new_zeros(offset), logprobs_B_K[b, :n], logprobs_B_K.new_zeros(width - offset - n)]))
    return torch.stack(rows)


def packable(model, context: int) -> bool:
    """Whether suffixes may share a row of up to `context` keys: the attention takes a prepared
    boolean 4D mask (sdpa; eager attention adds its mask, flash-attention ignores one), and a
    sliding window, which that mask would replace, is no shorter than the row."""
    window = getattr(model.config, "sliding_window", None)
    return getattr(model.config, "_attn_implementation", None) == "sdpa" and (not window or context <= window)


def packing(lengths: Sequence[int], prefixes: Sequence[int]) -> tuple[list[list[int]], int]:
    """(rows, width): pack_rows at the row width, from the longest suffix to twice it, that runs the
    fewest row positions (the ties: the narrowest, as attention grows with the width)."""
    longest = max(lengths)
    widths = range(longest, 2 * longest + 1)
    rows = {width: pack_rows(lengths, prefixes, width) for width in widths}
    width = min(widths, key=lambda w: len(rows[w]) * w)
    return rows[width], width


def pack_rows(lengths: Sequence[int], prefixes: Sequence[int], width: int) -> list[list[int]]:
    """Datum indices per row, first-fit decreasing: a row holds suffixes of one prefix (they read
    the same prefix keys) whose lengths sum to at most `width`."""
    rows: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        r = next((r for r, row in enumerate(rows) if prefixes[row[0]] == prefixes[i] and room[r] >= lengths[i]), None)
        if r is None:
            rows.append([i])
            room.append(width - lengths[i])
        else:
            rows[r].append(i)
            room[r] -= lengths[i]
    return rows


def _packed_suffixes(model, decoder, cache, rows: list[list[int]], suffixes, splits: list[int], row_to_unique: list[int], prefix_attention_U_P, width: int, width_S: int, pad_id: int, device) -> torch.Tensor:
    """Float[B, S, D]: the suffixes' last hidden states, computed with several suffixes to a row
    (`rows`, from pack_rows). Each token sees its prefix's keys and the tokens of its own suffix
    up to itself, at its own positions, as in a row of its own; padding sees the prefix only.
    Returned in the one-suffix-a-row layout (padding positions hold row 0's first state)."""
    R = len(rows)
    tokens_R_W = torch.full((R, width), pad_id, dtype=torch.long)
    positions_R_W = torch.zeros((R, width), dtype=torch.long)
    segment_R_W = torch.full((R, width), -1, dtype=torch.long)
    index_B_S = torch.zeros((len(suffixes), width_S), dtype=torch.long)
    for r, row in enumerate(rows):
        at = 0
        for b in row:
            n = len(suffixes[b])
            tokens_R_W[r, at : at + n] = torch.tensor(suffixes[b], dtype=torch.long)
            positions_R_W[r, at : at + n] = torch.arange(splits[b], splits[b] + n)
            segment_R_W[r, at : at + n] = b
            index_B_S[b, :n] = torch.arange(r * width + at, r * width + at + n)
            at += n
    same_R_W_W = (segment_R_W[:, :, None] == segment_R_W[:, None, :]) & (segment_R_W[:, :, None] >= 0)
    causal_R_W_W = same_R_W_W & torch.ones(width, width, dtype=torch.bool).tril()
    expand_R = torch.tensor([row_to_unique[row[0]] for row in rows], device=device)
    prefix_R_W_P = prefix_attention_U_P.bool().index_select(0, expand_R)[:, None, :].expand(R, width, -1)
    mask_R_1_W_PW = torch.cat([prefix_R_W_P, causal_R_W_W.to(device)], dim=2)[:, None]
    cache.reorder_cache(expand_R)  # differentiable index_select: gradients sum back into the prefix
    hidden_R_W_D = decoder(input_ids=tokens_R_W.to(device), attention_mask=mask_R_1_W_PW, position_ids=positions_R_W.to(device), use_cache=True, **{cache_argument(model): cache}).last_hidden_state
    return hidden_R_W_D.reshape(R * width, -1)[index_B_S.to(device)]
