"""The transformer body and its output head, the head over some of the vocabulary if asked.

Why: under a decoder mask only the tokens it allows can be drawn or scored, about 100 of
SmolLM2's 49,152 at an emoji step. The masked log-softmax over those tokens is the one over the
whole vocabulary with the others at -inf (they add exp(-inf) = 0), so the head's product, the
largest of a decode step, and the [N, V] softmax, cumulative sum and draw after it run on the
allowed columns alone (docs/performance.md, change 23).
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

# Set by precision.bfloat16_compute on the head: the bf16 copy its forward multiplies by.
COMPUTE_WEIGHT = "emojikit_compute_weight"


def decoder_of(model):
    """The transformer under the vocabulary projection (LoRA layers are injected in place)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.get_decoder()


def project(model, hidden_N_D: torch.Tensor, columns_K: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Logits from final hidden states, as the model's own forward makes them: for every token,
    or (columns_K, ascending token ids) for those tokens only, float32."""
    head = model.get_output_embeddings()
    if columns_K is None:
        logits_N_V = head(hidden_N_D)
    else:
        weight = getattr(head, COMPUTE_WEIGHT, None)
        weight = head.weight if weight is None else weight
        bias = None if head.bias is None else head.bias.index_select(0, columns_K).to(weight.dtype)
        logits_N_V = F.linear(hidden_N_D.to(weight.dtype), weight.index_select(0, columns_K), bias).float()
    config = model.config
    if getattr(config, "logit_scale", None):  # Cohere
        logits_N_V = logits_N_V * config.logit_scale
    if getattr(config, "final_logit_softcapping", None):  # Gemma 2 and 3
        logits_N_V = torch.tanh(logits_N_V / config.final_logit_softcapping) * config.final_logit_softcapping
    return logits_N_V


def allowed_columns(allowed_N_V: torch.Tensor, targets_N: Optional[torch.Tensor] = None) -> Optional[torch.Tensor]:
    """Long[K]: the token ids any row allows (and the rows' targets, so that a target the mask
    forbids keeps its -inf logprob rather than falling outside the columns), ascending; None
    (every column) when they are more than a quarter of the vocabulary, where copying their rows
    of the head's weight would cost about what the narrower product saves."""
    any_V = allowed_N_V.any(dim=0)
    if targets_N is not None:
        any_V = any_V.clone()
        any_V[targets_N] = True
    columns_K = any_V.nonzero().squeeze(-1)
    return columns_K if len(columns_K) <= len(any_V) // 4 else None
