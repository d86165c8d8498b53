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

from contextlib import contextmanager
from functools import lru_cache, partial
from typing import Iterator, Optional

import torch
import torch.nn.functional as F

from emojikit_local.head import COMPUTE_WEIGHT

BF16 = torch.bfloat16


class PackedWeight:
    """A frozen bf16 weight laid out once in oneDNN's blocked format, for its product and (the
    transpose) for the input gradient. Why: given a plain weight, oneDNN reorders it into that
    layout on every call, which costs most where the product is small (few rows, or AMX units
    that multiply faster than the reorder runs: oneDNN #2984). The products are the same
    (bit-identical on AVX512-BF16). CPU only; `prepack_available` says where."""

    def __init__(self, weight_bf: torch.Tensor, backward: bool = True, rows_hint: int = 512):
        self.forward = torch.ops.mkldnn._reorder_linear_weight(weight_bf, rows_hint)
        self.backward = torch.ops.mkldnn._reorder_linear_weight(weight_bf.t().contiguous(), rows_hint) if backward else None


def prepack_available(device: torch.device) -> bool:
    """Whether frozen bf16 weights can be prepacked on `device`: a CPU whose oneDNN lays out bf16
    weights. Elsewhere the products run from the plain weights."""
    return device.type == "cpu" and torch.backends.mkldnn.is_available() and _cpu_reorders_bfloat16()


@lru_cache(maxsize=None)
def _cpu_reorders_bfloat16() -> bool:
    """oneDNN's bf16 weight reorder needs avx512bw, avx512vl and avx512dq (or avx_ne_convert): an
    AVX2-only CPU, where bf16 is emulated, refuses it. Asked once by trying, which holds on every
    platform where a flag list would not."""
    try:
        torch.ops.mkldnn._reorder_linear_weight(torch.zeros(8, 8, dtype=BF16), 8)
    except (RuntimeError, NotImplementedError, AttributeError):
        return False
    return True


def _product(x_bf: torch.Tensor, weight_bf: torch.Tensor, bias_bf: Optional[torch.Tensor], packed: Optional[PackedWeight]) -> torch.Tensor:
    """x_bf @ weight_bf.T + bias_bf in bf16, from the prepacked weight when there is one."""
    if packed is None:
        return F.linear(x_bf, weight_bf, bias_bf)
    return torch.ops.mkldnn._linear_pointwise(x_bf, packed.forward, bias_bf, "none", [], "")


def _input_gradient(g_bf: torch.Tensor, weight_bf: torch.Tensor, packed: Optional[PackedWeight]) -> torch.Tensor:
    """g_bf @ weight_bf in bf16: the gradient of a product's input."""
    if packed is None or packed.backward is None:
        return g_bf @ weight_bf
    return torch.ops.mkldnn._linear_pointwise(g_bf, packed.backward, None, "none", [], "")


class _LoraLinearBF16(torch.autograd.Function):
    """base(x) + scaling * B(A(x)) with every product in bf16 and the sum in float32, for one
    adapter without dropout (the training case), with a backward written out: the incoming
    gradient is cast to bf16 once for the three products that need it, the two input-gradient
    products are summed in one addmm, and autograd walks one node per projection instead of
    ten (casts, two linears, the scaled add). The weight gradients come back in float32."""

    @staticmethod
    def forward(ctx, x, weight_bf, bias_bf, lora_A, lora_B, scaling, packed=None):
        x_bf, a_bf, b_bf = x.to(BF16), lora_A.to(BF16), lora_B.to(BF16)
        h_bf = F.linear(x_bf, a_bf)
        out = _product(x_bf, weight_bf, bias_bf, packed).float().add_(F.linear(h_bf, b_bf), alpha=scaling)
        ctx.save_for_backward(x_bf, weight_bf, a_bf, b_bf, h_bf)
        ctx.scaling, ctx.packed = scaling, packed
        return out

    @staticmethod
    def backward(ctx, grad_out):
        x_bf, weight_bf, a_bf, b_bf, h_bf = ctx.saved_tensors
        g_N_O = grad_out.reshape(-1, grad_out.shape[-1]).to(BF16)
        x_N_I, h_N_R = x_bf.reshape(-1, x_bf.shape[-1]), h_bf.reshape(-1, h_bf.shape[-1])
        grad_h_N_R = (g_N_O @ b_bf).mul_(ctx.scaling)
        grad_A = (grad_h_N_R.t() @ x_N_I).float()
        grad_B = (g_N_O.t() @ h_N_R).float().mul_(ctx.scaling)
        grad_x = torch.addmm(_input_gradient(g_N_O, weight_bf, ctx.packed), grad_h_N_R, a_bf).reshape(grad_out.shape[:-1] + (x_bf.shape[-1],))
        return grad_x.float(), None, None, grad_A, grad_B, None, None


class _FrozenLinearBF16(torch.autograd.Function):
    """A frozen projection (the output head, a projection without an adapter) from its prepacked
    bf16 weight, float32 out; its backward gives the input's gradient alone."""

    @staticmethod
    def forward(ctx, x, weight_bf, bias_bf, packed):
        ctx.weight_bf, ctx.packed = weight_bf, packed
        return _product(x.to(BF16), weight_bf, bias_bf, packed).float()

    @staticmethod
    def backward(ctx, grad_out):
        return _input_gradient(grad_out.to(BF16), ctx.weight_bf, ctx.packed).float(), None, None, None


def _active_adapters(layer) -> list[str]:
    """The adapters peft's lora.Linear would apply now (none while adapters are disabled)."""
    return [] if layer.disable_adapters else [n for n in layer.active_adapters if n in layer.lora_A]


def _lora_linear_forward(layer, base: torch.nn.Linear, packed: Optional[PackedWeight], x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    """peft's lora.Linear.forward for the active adapters, with both matmuls in bf16 and the
    sum in float32 (the frozen base product and each adapter's B(A(x)) * scaling)."""
    names = _active_adapters(layer)
    if len(names) == 1 and isinstance(layer.lora_dropout[names[0]], torch.nn.Identity):
        name = names[0]
        return _LoraLinearBF16.apply(x, base.weight, base.bias, layer.lora_A[name].weight, layer.lora_B[name].weight, layer.scaling[name], packed)
    if not names and packed is not None:
        return _merged_forward(base.weight, base.bias, packed, x)
    x_bf = x.to(BF16)
    out = F.linear(x_bf, base.weight, base.bias).float()
    for name in names:
        dropout = layer.lora_dropout[name]
        h_bf = x_bf if isinstance(dropout, torch.nn.Identity) else dropout(x).to(BF16)
        delta = F.linear(F.linear(h_bf, layer.lora_A[name].weight.to(BF16)), layer.lora_B[name].weight.to(BF16))
        out = out.add_(delta, alpha=layer.scaling[name])  # fp32 sum, no fp32 copy of delta
    return out


def _merged_forward(weight_bf: torch.Tensor, bias: Optional[torch.Tensor], packed: Optional[PackedWeight], x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    if packed is not None:
        if x.requires_grad and torch.is_grad_enabled():
            return _FrozenLinearBF16.apply(x, weight_bf, bias, packed)
        return _product(x.to(BF16), weight_bf, bias, packed).float()  # no graph to record (sampling, layers below the adapter)
    return F.linear(x.to(BF16), weight_bf, bias).float()


def _merged_forward_fp32(weight: torch.Tensor, bias: Optional[torch.Tensor], x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    return F.linear(x, weight, bias)


def _head_forward(weight_bf: torch.Tensor, bias: Optional[torch.Tensor], packed: Optional[PackedWeight], hidden: torch.Tensor) -> torch.Tensor:
    """Logits in float32 from a bf16 product: the log-softmax that decides logprobs runs in fp32."""
    return _merged_forward(weight_bf, None if bias is None else bias.to(BF16), packed, hidden)


def unadapted_projections(model, adapted: list) -> list[torch.nn.Linear]:
    """The model's linear layers outside the LoRA layers `adapted` (their bases and adapters),
    the output head excepted: the frozen projections below `lora_layers`."""
    inside = {id(m) for layer in adapted for m in layer.modules()}
    head = model.get_output_embeddings()
    return [m for m in model.modules() if isinstance(m, torch.nn.Linear) and id(m) not in inside and m is not head]


def bfloat16_compute(model, prepack: bool = False) -> "MergedSampling":
    """Switch a float32 peft model to the bf16 compute path (module docstring), in place; returns
    the sampler's merged weights (MergedSampling) for the policy to use while it samples. With
    prepack, every frozen bf16 weight (and the sampler's merged ones) is also kept in oneDNN's
    blocked layout (PackedWeight; CPU only, 2 more bytes per weight for each layout)."""
    from peft.tuners.lora import Linear as LoraLinear

    def packed(weight_bf: torch.Tensor, backward: bool = True) -> Optional[PackedWeight]:
        return PackedWeight(weight_bf, backward) if prepack else None

    layers = [module for module in model.modules() if isinstance(module, LoraLinear)]
    for module in layers:
        if any(module.use_dora.get(name, False) for name in module.lora_A):
            raise ValueError("dtype = 'bfloat16' does not support DoRA adapters")
        base = module.get_base_layer()
        base.weight.data = base.weight.data.to(BF16)  # frozen: no fp32 copy is needed
        if base.bias is not None:
            base.bias.data = base.bias.data.to(BF16)
        module.forward = partial(_lora_linear_forward, module, base, packed(base.weight.data))
    head = model.get_output_embeddings()
    # Projections without an adapter (the layers below `lora_layers`) are frozen and need no
    # gradient of their own: a bf16 weight and product, float32 out, as the merged sampler's.
    for module in unadapted_projections(model, layers):
        weight_bf = module.weight.detach().to(BF16)
        module.weight.data = weight_bf
        module.forward = partial(_merged_forward, weight_bf, None if module.bias is None else module.bias.detach().to(BF16), packed(weight_bf))
    # The head is usually tied to the input embedding, which stays fp32 for the lookup: the bf16
    # copy is the head's alone (frozen, so it never goes stale).
    head_bf = head.weight.detach().to(BF16)
    head.forward = partial(_head_forward, head_bf, head.bias, packed(head_bf))
    setattr(head, COMPUTE_WEIGHT, head_bf)  # for the head over a mask's allowed tokens (head.project)
    return MergedSampling(layers, prepack=prepack)


def float32_merged_sampling(model) -> Optional[MergedSampling]:
    """The sampler's merged float32 weights for a float32 peft model (None with DoRA, whose
    magnitude vector a plain W + BA leaves out)."""
    from peft.tuners.lora import Linear as LoraLinear

    layers = [module for module in model.modules() if isinstance(module, LoraLinear)]
    if any(module.use_dora.get(name, False) for module in layers for name in module.lora_A):
        return None
    return MergedSampling(layers, dtype=torch.float32)


def dither(shape: torch.Size, generator: torch.Generator) -> torch.Tensor:
    """Int16 noise, uniform over the 16 bits a float32 -> bf16 rounding drops (offset by 2**15)."""
    return torch.randint(-(1 << 15), 1 << 15, shape, dtype=torch.int16, generator=generator)


def dithered_bfloat16(x: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """x (float32) rounded to a bf16 neighbour chosen by the noise: up with probability equal to
    the fraction of the step x lies above the lower neighbour, so the rounding is unbiased over
    the noise, and an adapter delta below half a bf16 step of its weight survives in the merged
    weights on average instead of rounding away (round-to-nearest gives the base weight back).
    The noise is drawn once per weight and reused (a fixed dither), so a merge costs a few
    elementwise passes instead of a random draw per weight."""
    bits = x.contiguous().view(torch.int32) + noise + (1 << 15)
    return (bits & -65536).view(torch.float32).to(BF16)  # exact: the dropped bits are 0


class MergedSampling:
    """The sampler's weights: each LoRA-wrapped projection's adapter folded into a copy of its
    base weight (W + scaling * B A, summed in fp32), so a decode step runs one matmul per
    projection instead of three plus casts. Under dtype = "bfloat16" the copy is bf16, rounded
    once with a fixed dither (`dithered_bfloat16`); in float32 it is float32 (4 bytes per adapted
    weight), and the sampler's logprobs differ from the trainer's by float rounding alone
    (~1e-5 nats; docs/performance.md, change 23).

    Why: a decode step multiplies a handful of rows, so it is bound by per-call overhead and by
    reading the weights, not by FLOPs; the separate LoRA products and their casts were ~30 % of
    sampling time (docs/performance.md, change 11). The merged copy (2 bytes per base weight) is
    made again only after the adapter changed (`invalidate`: an optimizer step or a load; ~60 ms
    for SmolLM2), plus the dither (2 bytes per weight). The trainer keeps the unmerged products,
    so the rounding of W + BA adds to the sampler/trainer gap that SamplerCorrection corrects
    for: on SmolLM2 the median gap per token moved 0.022 -> 0.026 nats, the worst 0.22 -> 0.26;
    round-to-nearest instead gave 0.047 and 1.13, having dropped the small adapter deltas.
    """

    def __init__(self, layers: list, seed: int = 0, prepack: bool = False, dtype: torch.dtype = BF16):
        self.layers = layers  # peft lora.Linear modules (on the bf16 path, with dtype BF16)
        self.dtype = dtype
        self.prepack = prepack  # the merged weights in oneDNN's layout too (forward only: sampling)
        self.weights: Optional[list[torch.Tensor]] = None
        self.packed: list[Optional[PackedWeight]] = []
        self.generator = torch.Generator().manual_seed(seed)
        self.noise: dict[int, torch.Tensor] = {}  # layer index -> its dither, drawn at its first merge

    def invalidate(self) -> None:
        self.weights = None

    @torch.no_grad()
    def _merge(self) -> list[torch.Tensor]:
        merged = []
        for i, layer in enumerate(self.layers):
            base, names = layer.get_base_layer(), _active_adapters(layer)
            if not names:
                merged.append(base.weight)
                continue
            if self.dtype == torch.float32 and base.weight.dtype == torch.float32 and not any(layer.lora_B[n].weight.any() for n in names):
                merged.append(base.weight)  # B = 0 (a fresh adapter): W + BA is W, no copy needed
                continue
            weight = base.weight.detach().to(torch.float32, copy=True)  # a copy: the sum must not reach the base
            for name in names:
                weight.addmm_(layer.lora_B[name].weight.float(), layer.lora_A[name].weight.float(), alpha=layer.scaling[name])
            if self.dtype == torch.float32:
                merged.append(weight)
                continue
            if i not in self.noise:
                self.noise[i] = dither(weight.shape, self.generator)
            merged.append(dithered_bfloat16(weight, self.noise[i]))
        return merged

    @contextmanager
    def active(self) -> Iterator[None]:
        """Within: every LoRA-wrapped projection runs its merged bf16 weight (inference only)."""
        if self.weights is None:
            self.weights = self._merge()
            self.packed = [PackedWeight(w, backward=False, rows_hint=16) if self.prepack else None for w in self.weights]
        saved = [layer.forward for layer in self.layers]
        for layer, weight, packed in zip(self.layers, self.weights, self.packed):
            bias = layer.get_base_layer().bias
            layer.forward = partial(_merged_forward_fp32, weight, bias) if self.dtype == torch.float32 else partial(_merged_forward, weight, bias, packed)
        try:
            yield
        finally:
            for layer, forward in zip(self.layers, saved):
                layer.forward = forward


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
