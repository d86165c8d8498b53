"""Sibling projections that read one input (attention's q/k/v, the MLP's gate/up) multiplied as
one product on the bf16 compute path.

Why: the model's shapes are small (SmolLM2: 576 wide), so each product runs far below the
machine's matmul peak and pays its own cast of the input to bf16 and, in backward, its own cast
of the gradient and an fp32 sum into the input's gradient. One product of the stacked weights
([Wq; Wk; Wv]: 960 x 576, [Wgate; Wup]: 3072 x 576) casts the input once, multiplies a wider
matrix, and in backward gives the input's gradient in one product ([gq gk gv] @ [Wq; Wk; Wv]).
The LoRA A matrices stack too (one product and one weight gradient for the group); each B
multiplies its own slice. The sums are the same as the separate products', in another order.

How: the members' bf16 base weights become views into the stacked weight (no second copy). The
first member called with an input computes every member's output and keeps the others' for
them; a sibling called with that same tensor takes its own. Anything else (another input, more
than one active adapter, dropout) runs the member alone, as before (precision.py).
"""

from __future__ import annotations

from functools import partial
from typing import Callable, Optional

import torch
import torch.nn.functional as F

from emojikit_local.precision import BF16, PackedWeight, _input_gradient, _lora_linear_forward, _merged_forward, _product

SIBLINGS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))  # transformers' Llama, Mistral, Qwen, Gemma names


class _SiblingsBF16(torch.autograd.Function):
    """x @ [W_1; ...; W_n].T in bf16 (float32 out), split into the members' outputs, each plus
    its adapter's scaling * B_i(A_i(x)) when `lora` holds (A_1, B_1, ..., A_n, B_n)."""

    @staticmethod
    def forward(ctx, x, weight_bf, bias_bf, packed, sizes, scalings, *lora):
        x_bf = x.to(BF16)
        outs = _product(x_bf, weight_bf, bias_bf, packed).float().split(sizes, -1)
        ctx.sizes, ctx.scalings, ctx.packed, ctx.lora = sizes, scalings, packed, bool(lora)
        if not lora:
            ctx.save_for_backward(weight_bf)
            return outs
        a_bf = torch.cat([a.to(BF16) for a in lora[0::2]])
        b_bfs = [b.to(BF16) for b in lora[1::2]]
        h_bf = F.linear(x_bf, a_bf)
        ctx.ranks = [b.shape[1] for b in b_bfs]
        for out, h, b_bf, scaling in zip(outs, h_bf.split(ctx.ranks, -1), b_bfs, scalings):
            out.add_(F.linear(h, b_bf), alpha=scaling)  # in place on this member's columns
        ctx.save_for_backward(weight_bf, x_bf, a_bf, h_bf, *b_bfs)
        return outs

    @staticmethod
    def backward(ctx, *grads):
        weight_bf = ctx.saved_tensors[0]
        shape = grads[0].shape[:-1]
        g_N_O = torch.empty(shape.numel(), sum(ctx.sizes), dtype=BF16, device=grads[0].device)
        for g_N_o, grad in zip(g_N_O.split(ctx.sizes, -1), grads):
            g_N_o.copy_(grad.reshape(-1, grad.shape[-1]))  # the cast to bf16, once per member
        grad_x = _input_gradient(g_N_O, weight_bf, ctx.packed)
        if not ctx.lora:
            return (grad_x.reshape(shape + (grad_x.shape[-1],)).float(), None, None, None, None, None)
        _, x_bf, a_bf, h_bf, *b_bfs = ctx.saved_tensors
        x_N_I, h_N_R = x_bf.reshape(-1, x_bf.shape[-1]), h_bf.reshape(-1, h_bf.shape[-1])
        grad_h_N_R = torch.empty_like(h_N_R)
        lora_grads = []
        for g_N_o, h_N_r, grad_h_N_r, b_bf, scaling in zip(g_N_O.split(ctx.sizes, -1), h_N_R.split(ctx.ranks, -1), grad_h_N_R.split(ctx.ranks, -1), b_bfs, ctx.scalings):
            torch.mm(g_N_o, b_bf, out=grad_h_N_r) if grad_h_N_r.is_contiguous() else grad_h_N_r.copy_(g_N_o @ b_bf)
            grad_h_N_r.mul_(scaling)
            lora_grads.append((g_N_o.t() @ h_N_r).float().mul_(scaling))  # grad of B_i
        grad_A = (grad_h_N_R.t() @ x_N_I).float().split(ctx.ranks, 0)
        grad_x = torch.addmm(grad_x, grad_h_N_R, a_bf).reshape(shape + (x_bf.shape[-1],))
        return (grad_x.float(), None, None, None, None, None) + tuple(g for pair in zip(grad_A, lora_grads) for g in pair)


class SiblingGroup:
    """Projections that read one input, run as one product (module docstring). `members` are
    peft lora.Linear modules (adapted) or plain nn.Linear ones (frozen), all on the bf16 path."""

    def __init__(self, members: list, prepack: bool):
        self.members = members
        bases = [_base(m) for m in members]
        self.sizes = [b.out_features for b in bases]
        self.weight_bf = torch.cat([b.weight.data for b in bases])
        for base, view in zip(bases, self.weight_bf.split(self.sizes)):
            base.weight.data = view  # one copy of the weights: the members' are views into it
        self.bias_bf = None if bases[0].bias is None else torch.cat([b.bias.data.to(BF16) for b in bases])
        self.packed = PackedWeight(self.weight_bf) if prepack else None
        # A member alone (the calls the group cannot serve: rare), from its plain bf16 weight.
        self.alone: list[Callable] = [
            partial(_lora_linear_forward, m, b, None) if hasattr(m, "lora_A") else partial(_merged_forward, b.weight.data, None if b.bias is None else b.bias.data.to(BF16), None)
            for m, b in zip(members, bases)
        ]
        self.sampling = False  # within MergedSampling.active: the product of the stacked merged weights
        self.merged: Optional[tuple[torch.Tensor, Optional[PackedWeight]]] = None
        self.source: Optional[torch.Tensor] = None  # the input the kept outputs were computed from
        self.key: tuple = ()
        self.kept: dict[int, torch.Tensor] = {}

    def forward(self, index: int, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        key = (torch.is_grad_enabled(), self.sampling, None if x.is_inference() else x._version, *self._adapters())
        if x is self.source and key == self.key and index in self.kept:
            out = self.kept.pop(index)
            if not self.kept:
                self.source = None  # do not hold the activation past its last sibling
            return out
        if self.sampling and self.merged is not None:
            outs = _product(x.to(BF16), self.merged[0], self.bias_bf, self.merged[1]).float().split(self.sizes, -1)
        else:
            lora = self._lora()
            if lora is None:
                return self.alone[index](x, *args, **kwargs)
            scalings = [m.scaling[name] for m, name in zip(self.members, self._adapters())] if lora else []
            outs = _SiblingsBF16.apply(x, self.weight_bf, self.bias_bf, self.packed, self.sizes, scalings, *lora)
        self.source, self.key = x, key
        self.kept = {i: out for i, out in enumerate(outs) if i != index}
        return outs[index]

    def sampling_weight(self, merged_bf: torch.Tensor, prepack: bool) -> None:
        """The members' merged weights (precision.MergedSampling), stacked, for sampling."""
        self.merged = (merged_bf, PackedWeight(merged_bf, backward=False, rows_hint=16) if prepack else None)

    def _adapters(self) -> tuple:
        """Each member's one active adapter (frozen members have none)."""
        return tuple(name for m in self.members if hasattr(m, "lora_A") for name in _active(m))

    def _lora(self) -> Optional[list]:
        """[A_1, B_1, ...] of the members' active adapters, [] when none is active (the frozen
        product), None when the group cannot serve the call (members differ, dropout, several
        adapters)."""
        if not hasattr(self.members[0], "lora_A"):
            return []
        active = [_active(m) for m in self.members]
        if all(not names for names in active):
            return []
        if any(len(names) != 1 for names in active):
            return None
        lora = []
        for m, (name,) in zip(self.members, active):
            if not isinstance(m.lora_dropout[name], torch.nn.Identity):
                return None
            lora += [m.lora_A[name].weight, m.lora_B[name].weight]
        return lora


def _base(module) -> torch.nn.Linear:
    return module.get_base_layer() if hasattr(module, "get_base_layer") else module


def _active(layer) -> list[str]:
    return [] if layer.disable_adapters else [n for n in layer.active_adapters if n in layer.lora_A]


def group_siblings(model, prepack: bool, merged_sampling=None) -> list[SiblingGroup]:
    """Make every run of sibling projections in `model` (SIBLINGS: same parent, same input
    width, all adapted or all frozen, biases all present or all absent) one SiblingGroup, its
    members' forwards routed through it (their own prepacked weights, if any, are let go). Call
    after precision.bfloat16_compute, which puts the weights in bf16."""
    groups = []
    for parent in model.modules():
        for names in SIBLINGS:
            members = [getattr(parent, name, None) for name in names]
            if any(m is None for m in members):
                continue
            bases = [_base(m) for m in members]
            if not all(isinstance(b, torch.nn.Linear) and b.weight.dtype == BF16 for b in bases):
                continue
            if len({b.in_features for b in bases}) > 1 or len({hasattr(m, "lora_A") for m in members}) > 1 or len({b.bias is None for b in bases}) > 1:
                continue
            group = SiblingGroup(members, prepack)
            for index, member in enumerate(members):
                member.forward = partial(group.forward, index)
            groups.append(group)
    if merged_sampling is not None:
        merged_sampling.groups = [g for g in groups if hasattr(g.members[0], "lora_A")]
        merged_sampling.grouped = {id(m) for g in merged_sampling.groups for m in g.members}
        merged_sampling.invalidate()
    return groups
