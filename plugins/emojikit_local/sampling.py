"""Batched, KV-cached decoding with the decoder mask applied at every step.

Written out rather than using `generate()` so the mask and the recorded logprobs are exactly
the ones `distribution.tempered_logprobs` gives the trainer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch

from emojikit_local.distribution import allowed_rows, draw, tempered_logprobs


@dataclass
class Decoded:
    tokens: list[int]
    logprobs: list[float]
    stop_reason: str  # "eos" | "length"


def left_pad(rows: Sequence[Sequence[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens_B_T, attention_B_T) with every row right-aligned."""
    width = max(len(r) for r in rows)
    tokens_B_T = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention_B_T = torch.zeros((len(rows), width), dtype=torch.long)
    for b, row in enumerate(rows):
        tokens_B_T[b, width - len(row):] = torch.tensor(row, dtype=torch.long)
        attention_B_T[b, width - len(row):] = 1
    return tokens_B_T.to(device), attention_B_T.to(device)


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
    tokens_B_T, attention_B_T = left_pad(prompts, pad_id, device)
    batch = tokens_B_T.shape[0]
    positions_B_T = (attention_B_T.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=tokens_B_T, attention_mask=attention_B_T, position_ids=positions_B_T, use_cache=True, logits_to_keep=1)
    cache, logits_B_V = out.past_key_values, out.logits[:, -1]
    next_position_B = positions_B_T[:, -1] + 1
    stop_B_S = torch.tensor(sorted(stop_ids), device=device)

    states = [constraint.start() for _ in range(batch)] if constraint is not None else None
    done_B = torch.zeros(batch, dtype=torch.bool, device=device)
    results = [Decoded([], [], "length") for _ in range(batch)]
    for step in range(max_tokens):
        allowed_B_V = None
        if constraint is not None:
            live = [b for b in range(batch) if not done_B[b]]
            allowed_B_V = torch.ones_like(logits_B_V, dtype=torch.bool)
            allowed_B_V[live] = allowed_rows(constraint, [states[b] for b in live], [max_tokens - step] * len(live), logits_B_V.shape[-1], device)
        logprobs_B_V = tempered_logprobs(logits_B_V, temperature, allowed_B_V)
        next_B = draw(logprobs_B_V, temperature, top_p, generator)
        chosen_B = logprobs_B_V.gather(-1, next_B[:, None]).squeeze(-1)
        next_B = next_B.masked_fill(done_B, pad_id)
        for b in (~done_B).nonzero().flatten().tolist():
            token = int(next_B[b])
            results[b].tokens.append(token)
            results[b].logprobs.append(float(chosen_B[b]))
            if constraint is not None and token not in stop_ids:
                states[b] = constraint.advance(states[b], token)
        stopped_B = torch.isin(next_B, stop_B_S) & ~done_B
        for b in stopped_B.nonzero().flatten().tolist():
            results[b].stop_reason = "eos"
        done_B |= stopped_B
        if bool(done_B.all()) or step == max_tokens - 1:
            break
        attention_B_T = torch.cat([attention_B_T, torch.ones_like(attention_B_T[:, :1])], dim=-1)
        out = model(input_ids=next_B[:, None], attention_mask=attention_B_T, position_ids=next_position_B[:, None], past_key_values=cache, use_cache=True)
        cache, logits_B_V = out.past_key_values, out.logits[:, -1]
        next_position_B = next_position_B + 1
    return results
