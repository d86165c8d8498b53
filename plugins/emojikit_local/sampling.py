"""Batched, KV-cached decoding with the decoder mask applied at every step.

Written out rather than using `generate()` so the mask and the recorded logprobs are exactly
the ones `distribution.tempered_logprobs` gives the trainer.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch

from emojikit_local.distribution import allowed_rows, draw, tempered_logprobs
from emojikit_local.head import allowed_columns, decoder_of, project

# Below this many shared tokens the extra cache copy costs more than the shared pass saves.
MIN_COMMON_PREFIX = 4


@dataclass
class Decoded:
    tokens: list[int]
    logprobs: list[float]
    stop_reason: str  # "eos" | "length"


def cache_argument(model) -> str:
    """The name the model's forward takes its KV cache by: `cache` from transformers 5.24 (which
    deprecates `past_key_values` with a FutureWarning at every call), `past_key_values` before."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return _cache_argument_of(type(base.get_decoder()))


@functools.lru_cache(maxsize=None)
def _cache_argument_of(decoder_class: type) -> str:
    # read once per class: it is asked at every scored micro-batch
    return "cache" if "cache" in inspect.signature(decoder_class.forward).parameters else "past_key_values"


def returned_cache(out):
    """The KV cache a forward returned (`cache` from transformers 5.24, `past_key_values` before)."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def left_pad(rows: Sequence[Sequence[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens_B_T, attention_B_T) with every row right-aligned."""
    width = max(len(r) for r in rows)
    tokens_B_T = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention_B_T = torch.zeros((len(rows), width), dtype=torch.long)
    for b, row in enumerate(rows):
        tokens_B_T[b, width - len(row):] = torch.tensor(row, dtype=torch.long)
        attention_B_T[b, width - len(row):] = 1
    return tokens_B_T.to(device), attention_B_T.to(device)


def common_prefix_length(prefixes: Sequence[Sequence[int]]) -> int:
    """How many leading tokens all prefixes share (the chat template and system prompt: in SFT
    batches ~a third of each short example, in a first turn's prompt 19 of ~30 tokens)."""
    shortest = min(len(p) for p in prefixes)
    for i in range(shortest):
        token = prefixes[0][i]
        if any(p[i] != token for p in prefixes):
            return i
    return shortest


def unique_rows(rows: Sequence[Sequence[int]]) -> tuple[list[list[int]], list[int]]:
    """(distinct rows in first-seen order, index of each row's distinct row)."""
    index: dict[tuple[int, ...], int] = {}
    row_to_unique = [index.setdefault(tuple(r), len(index)) for r in rows]
    return [list(r) for r in index], row_to_unique


@torch.inference_mode()
def decode_batch(
    model,
    prompts: Sequence[Sequence[int]],
    *,
    max_tokens: int,
    temperature: float,
    top_p: float,
    constraint: Any,
    stop_ids: set[int],
    pad_id: int,
    generator: Optional[torch.Generator],
    device,
) -> list[Decoded]:
    """Decode every prompt row; rows that repeat a prompt (the n samples of a prompt, the
    members of a GRPO group) share one prefill, whose KV cache is then copied per row, and the
    distinct prompts' common start is prefilled once (prefill). Finished rows leave the batch,
    so late steps only pay for the rows still decoding. Under a constraint the head runs on
    the tokens it allows in some row only (head.py)."""
    batch = len(prompts)
    unique, row_to_unique = unique_rows(prompts)
    decoder, cache_name = decoder_of(model), cache_argument(model)
    out, attention_U_T, last_position_U = prefill(decoder, unique, pad_id, device, cache_name)
    expand_B = torch.tensor(row_to_unique, device=device)
    cache = returned_cache(out)
    if len(unique) < batch:
        cache.reorder_cache(expand_B)  # index_select on the batch dimension of every layer
    hidden_L_D = out.last_hidden_state[:, -1].index_select(0, expand_B)
    attention_L_T = attention_U_T.index_select(0, expand_B)
    next_position_L = last_position_U.index_select(0, expand_B) + 1
    stop_S = torch.tensor(sorted(stop_ids), device=device)

    # L indexes the rows still decoding; live[l] is the result row it fills.
    live = list(range(batch))
    states = [constraint.start() for _ in range(batch)] if constraint is not None else None
    results = [Decoded([], [], "length") for _ in range(batch)]
    vocab_size = model.get_output_embeddings().weight.shape[0]
    for step in range(max_tokens):
        if constraint is None:
            logprobs_L_K = tempered_logprobs(project(model, hidden_L_D), temperature)
            columns_K = None
        else:
            allowed_L_V = allowed_rows(constraint, [states[b] for b in live], [max_tokens - step] * len(live), vocab_size, device)
            columns_K = allowed_columns(allowed_L_V)
            allowed_L_K = allowed_L_V if columns_K is None else allowed_L_V[:, columns_K]
            logprobs_L_K = tempered_logprobs(project(model, hidden_L_D, columns_K), temperature, allowed_L_K)
        # the same draw as over the whole vocabulary: the columns keep the tokens' order, and the
        # tokens left out carry no probability
        drawn_L = draw(logprobs_L_K, temperature, top_p, generator)
        chosen_L = logprobs_L_K.gather(-1, drawn_L[:, None]).squeeze(-1)
        next_L = drawn_L if columns_K is None else columns_K[drawn_L]
        stopped_L = torch.isin(next_L, stop_S)
        for l, (b, token, logprob, stopped) in enumerate(zip(live, next_L.tolist(), chosen_L.tolist(), stopped_L.tolist())):
            results[b].tokens.append(token)
            results[b].logprobs.append(logprob)
            if stopped:
                results[b].stop_reason = "eos"
            elif constraint is not None:
                states[b] = constraint.advance(states[b], token)
        if step == max_tokens - 1:
            break
        keep_L = ~stopped_L
        if not bool(keep_L.any()):
            break
        if not bool(keep_L.all()):
            kept = keep_L.nonzero().flatten()
            live = [live[l] for l in kept.tolist()]
            cache.reorder_cache(kept)
            attention_L_T, next_L, next_position_L = attention_L_T[kept], next_L[kept], next_position_L[kept]
        attention_L_T = torch.cat([attention_L_T, torch.ones_like(attention_L_T[:, :1])], dim=-1)
        out = decoder(input_ids=next_L[:, None], attention_mask=attention_L_T, position_ids=next_position_L[:, None], use_cache=True, **{cache_name: cache})
        cache, hidden_L_D = returned_cache(out), out.last_hidden_state[:, -1]
        next_position_L = next_position_L + 1
    return results


def prefill(decoder, unique: Sequence[Sequence[int]], pad_id: int, device, cache_name: str):
    """(the decoder's output with the KV cache and each prompt's last hidden state, attention_U_T,
    last position per prompt). The chat template and system prompt every prompt starts with (19 of a
    first turn's ~30 tokens on SmolLM2) run once, batch 1; the cache of that start is copied to
    every row and only the rest of each prompt, left-padded, runs batched after it."""
    shared = min(common_prefix_length(unique), min(len(r) for r in unique) - 1)  # one token of each row stays to give its logits
    if len(unique) < 2 or shared < MIN_COMMON_PREFIX:
        tokens_U_T, attention_U_T = left_pad(unique, pad_id, device)
        positions_U_T = (attention_U_T.cumsum(-1) - 1).clamp(min=0)
        out = decoder(input_ids=tokens_U_T, attention_mask=attention_U_T, position_ids=positions_U_T, use_cache=True)
        return out, attention_U_T, positions_U_T[:, -1]
    start_1_P = torch.tensor([list(unique[0][:shared])], dtype=torch.long, device=device)
    started = decoder(input_ids=start_1_P, attention_mask=torch.ones_like(start_1_P), position_ids=torch.arange(shared, device=device)[None], use_cache=True)
    cache = returned_cache(started)
    cache.reorder_cache(torch.zeros(len(unique), dtype=torch.long, device=device))
    rest_U_S, rest_attention_U_S = left_pad([r[shared:] for r in unique], pad_id, device)
    # Pads sit between the shared start and each row's rest: masked keys, as left pads are.
    attention_U_T = torch.cat([rest_attention_U_S.new_ones(len(unique), shared), rest_attention_U_S], dim=1)
    positions_U_S = shared + (rest_attention_U_S.cumsum(-1) - 1).clamp(min=0)
    out = decoder(input_ids=rest_U_S, attention_mask=attention_U_T, position_ids=positions_U_S, use_cache=True, **{cache_name: cache})
    return out, attention_U_T, positions_U_S[:, -1]
