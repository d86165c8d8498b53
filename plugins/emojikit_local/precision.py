"""The `dtype = "bfloat16"` compute path, and the sampler correction it needs.

bfloat16 compute with float32 weights where they are trained: every LoRA-wrapped projection
(the frozen base weight stored in bf16, the fp32 LoRA A and B cast to bf16 per call) and the
output head (a bf16 copy of its frozen weight) multiply in bf16; their results come back as
float32, so the residual stream, norms, attention, the log-softmax over the vocabulary, the
LoRA weights, their gradients and the optimizer state stay float32.

Why not the whole model in bf16: peft keeps LoRA in fp32 and then casts around every adapter
call, and bf16 attention backward is ~4x slower than fp32 on CPU (docs/performance.md), while
attention is ~2 % of the FLOPs of these short sequences. The matmuls are ~90 %, and a bf16
matmul of their shapes runs ~2.5-3x faster on CPUs with AVX512-BF16.

Why a correction: a bf16 matmul rounds its inputs and outputs to 8 bits of mantissa, so the
1e-6 differences between the sampler's KV-cached decode and the trainer's full pass (fp32
attention kernels of different shapes) cross rounding boundaries and grow through 30 layers to
~1e-2 nats per token (worst ~0.2). No ordering of kernels removes that, so the sampler's
logprobs are corrected for instead of matched (`SamplerCorrection`).
"""

from __future__ import annotations

from functools import partial
from typing import Optional

import torch
import torch.nn.functional as F

BF16 = torch.bfloat16


def _lora_linear_forward(layer, base: torch.nn.Linear, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    """peft's lora.Linear.forward for the active adapters, with both matmuls in bf16 and the
    sum in float32 (the frozen base product and each adapter's B(A(x)) * scaling)."""
    x_bf = x.to(BF16)
    out = F.linear(x_bf, base.weight, base.bias).float()
    if layer.disable_adapters:
        return out
    for name in layer.active_adapters:
        if name not in layer.lora_A:
            continue
        dropout = layer.lora_dropout[name]
        h_bf = x_bf if isinstance(dropout, torch.nn.Identity) else dropout(x).to(BF16)
        delta = F.linear(F.linear(h_bf, layer.lora_A[name].weight.to(BF16)), layer.lora_B[name].weight.to(BF16))
        out = out.add_(delta, alpha=layer.scaling[name])  # fp32 sum, no fp32 copy of delta
    return out


def _head_forward(weight_bf: torch.Tensor, bias: Optional[torch.Tensor], hidden: torch.Tensor) -> torch.Tensor:
    """Logits in float32 from a bf16 product: the log-softmax that decides logprobs runs in fp32."""
    return F.linear(hidden.to(BF16), weight_bf, None if bias is None else bias.to(BF16)).float()


def bfloat16_compute(model) -> None:
    """Switch a float32 peft model to the bf16 compute path (module docstring), in place."""
    from peft.tuners.lora import Linear as LoraLinear

    for module in model.modules():
        if not isinstance(module, LoraLinear):
            continue
        if any(module.use_dora.get(name, False) for name in module.lora_A):
            raise ValueError("dtype = 'bfloat16' does not support DoRA adapters")
        base = module.get_base_layer()
        base.weight.data = base.weight.data.to(BF16)  # frozen: no fp32 copy is needed
        if base.bias is not None:
            base.bias.data = base.bias.data.to(BF16)
        module.forward = partial(_lora_linear_forward, module, base)
    head = model.get_output_embeddings()
    # The head is usually tied to the input embedding, which stays fp32 for the lookup: the bf16
    # copy is the head's alone (frozen, so it never goes stale).
    head.forward = partial(_head_forward, head.weight.detach().to(BF16), head.bias)


class SamplerCorrection:
    """Truncated importance sampling against the sampler, with the PPO ratio taken against the
    trainer's own logprobs (Yao et al. 2025, "Your efficient RL framework secretly brings you
    off-policy RL training"; verl's and TRL's vLLM importance-sampling correction).

    When no optimizer step happened since the samples were drawn, the trainer's weights are the
    sampling weights, so its own detached logprobs are the behaviour policy's as the trainer
    computes them: the ratio starts at exactly 1 and the gap to the sampler's numbers becomes a
    per-token weight min(p_trainer / p_sampler, cap) on the advantage. Those logprobs are kept
    for the datum's later passes (PPO epochs). A datum first trained after an optimizer step
    (the second minibatch of a step) has no such record and keeps the sampler's logprobs
    uncorrected, as without this class.
    """

    def __init__(self, cap: float):
        self.cap = cap
        self.sampled_at_step: Optional[int] = None
        self.behaviour: dict[tuple, torch.Tensor] = {}

    def sampled(self, step: int) -> None:
        """New samples were drawn at optimizer step `step`: earlier records are stale."""
        self.sampled_at_step = step
        self.behaviour.clear()

    @staticmethod
    def _key(datum) -> tuple:
        return (tuple(datum.model_input), tuple(datum.target_tokens))

    def apply(self, chunk, step: int, logprobs_B_T: torch.Tensor, sampler_B_T: torch.Tensor, advantages_B_T: torch.Tensor, on_B_T: torch.Tensor, stats: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """(the logprobs the ratio is taken against, the advantages times the truncated IS
        weight). Records each row's gap |trainer - sampler| at weighted positions in stats."""
        old_B_T = sampler_B_T.clone()
        weight_B_T = torch.ones_like(sampler_B_T)
        current_B_T = logprobs_B_T.detach()
        for row, datum in enumerate(chunk):
            key, n = self._key(datum), len(datum.target_tokens)
            if key not in self.behaviour and step == self.sampled_at_step:
                self.behaviour[key] = current_B_T[row, :n].clone()
            behaviour_T = self.behaviour.get(key)
            if behaviour_T is None:
                continue
            old_B_T[row, :n] = behaviour_T
            weight_B_T[row, :n] = torch.exp(behaviour_T - sampler_B_T[row, :n]).clamp(max=self.cap)
        stats.setdefault("sampler_gap", []).append((old_B_T - sampler_B_T)[on_B_T].abs())
        stats.setdefault("is_truncated", []).append(weight_B_T[on_B_T] >= self.cap)
        return old_B_T, advantages_B_T * weight_B_T
