"""The decoder layers below the first adapted one, run once for a batch that is scored twice.

With LoRA trained in the top layers only (`lora_layers`), the layers below hold no trained
weight: no adapter at all, or, from a checkpoint (`init_from`), the checkpoint's adapter frozen
there, the same in the trained and the reference adapter. Their output is the same under
either, and the same before and after an optimizer step. GRPO scores each step's batch twice,
the KL's reference pass (compute_logprobs) and then the training pass (forward_backward), in
the same micro-batches; the training pass takes the lower layers' output from the reference
pass instead of computing it again (20 of SmolLM2's 30 layers with `lora_layers = 10`).

How: each lower layer's forward is wrapped (the module and its state_dict keys stay as they
are). Inside `LowerLayers.unit(key)` a micro-batch is either recorded (its decoder calls run,
the last lower layer's output of each is kept) or replayed (the lower layers pass the hidden
state through untouched, add placeholder keys and values of the right length to a KV cache so
that its length stays right for the layers above, and the last one returns the kept output).
The lower layers' own cache entries are never read: their attention is replayed too.
A unit's state is the calling thread's: the row workers (rows.py) run units side by side.

A training pass can also keep its lower outputs (`keep_bytes`, the local backend's
`keep_lower_layers_mb`): SFT with `repeat_batches` trains the first pass's batches again on every
later pass, and a kept batch skips the lower layers there. Kept entries stay until `forget()`
(new weights below, e.g. a loaded checkpoint); `retain(keys)` drops the scoring passes' entries
but those a new scoring pass asks for again.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Hashable, Iterator, Optional

import torch

MAX_BYTES = 1 << 30  # a batch whose lower outputs exceed this is not kept (it runs twice, as without the memo)


class LowerLayers:
    def __init__(self, model, max_bytes: int = MAX_BYTES, keep_bytes: int = 0):
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        decoder = base.get_decoder() if hasattr(base, "get_decoder") else None
        layers = getattr(decoder, "layers", None)
        config = getattr(base, "config", None)
        self.depth = 0  # 0: no layer below the trained ones is known (every layer trains, or another architecture)
        if isinstance(layers, torch.nn.ModuleList) and getattr(config, "num_attention_heads", None):
            self.depth = next((i for i, layer in enumerate(layers) if any(p.requires_grad for p in layer.parameters())), 0)
            self.kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
            self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.max_bytes = max_bytes
        self.enabled = self.depth > 0  # False: every pass runs every layer (bench/lower_layers.py's peer)
        self.entries: dict[Hashable, list[torch.Tensor]] = {}  # a scoring pass's batches, for the training pass that follows
        self.bytes = 0
        self.kept: dict[Hashable, list[torch.Tensor]] = {}  # training passes' batches, for a later pass over the same batches
        self.kept_bytes = 0
        self.keep_bytes = keep_bytes
        self.hits = 0  # units replayed: micro-batches, or their parts with row workers (a test's and a bench's check)
        self._unit = _UnitState()  # per thread: "record" or "replay" inside a unit, its outputs and call count
        self._lock = threading.Lock()  # the stores and their byte counts, shared by the threads
        self._dropout = False
        for index, layer in enumerate(layers[: self.depth] if self.depth else []):
            self._dropout |= any(getattr(m, "p", 0.0) > 0 for m in layer.modules() if isinstance(m, torch.nn.Dropout))
            self._dropout |= any(getattr(m, "attention_dropout", 0.0) > 0 for m in layer.modules())
            layer.forward = self._wrap(layer.forward, index)

    def clear(self) -> None:
        """Drops the scoring passes' entries (kept training batches stay)."""
        self.retain(())

    def retain(self, keys) -> None:
        """Drops the scoring passes' entries but those of `keys` (kept training batches stay): a
        batch scored again (the SFT's test chats at every evaluation) replays its lower layers."""
        for key in [key for key in self.entries if key not in keys]:
            self.bytes -= sum(t.numel() * t.element_size() for t in self.entries.pop(key))

    def forget(self) -> None:
        """Drops every entry: the layers below changed."""
        self.clear()
        self.kept.clear()
        self.kept_bytes = 0

    @contextmanager
    def unit(self, key: Hashable, *, record: bool, training: bool = False, keep: bool = False) -> Iterator[None]:
        """One micro-batch's decoder calls: replayed when `key` was recorded, else recorded when
        `record` (for the next pass) or `keep` (for a later pass, while keep_bytes has room), else
        run as they are. Lower layers with dropout run as they are while training."""
        mode, stored = None, self.entries.get(key, self.kept.get(key))
        keep = keep and self.kept_bytes < self.keep_bytes
        if self.enabled and not (training and self._dropout):
            mode = "replay" if stored is not None else ("record" if record or keep else None)
        unit = self._unit
        unit.mode, unit.outputs, unit.call = mode, (stored if mode == "replay" else []), 0
        try:
            yield
            with self._lock:
                if unit.mode == "record" and unit.outputs:
                    size = sum(t.numel() * t.element_size() for t in unit.outputs)
                    if record and self.bytes + size <= self.max_bytes:
                        self.entries[key] = unit.outputs
                        self.bytes += size
                    elif not record and self.kept_bytes + size <= self.keep_bytes:
                        self.kept[key] = unit.outputs
                        self.kept_bytes += size
                elif mode == "replay":
                    self.hits += 1
        finally:
            unit.mode, unit.outputs, unit.call = None, [], 0

    def _wrap(self, forward, index: int):
        last = index == self.depth - 1

        def lower_layer(hidden_states: torch.Tensor, *args, **kwargs):
            unit = self._unit
            if unit.mode != "replay":
                out = forward(hidden_states, *args, **kwargs)
                if unit.mode == "record" and last:
                    if not isinstance(out, torch.Tensor):  # a model whose layers return tuples: not kept
                        unit.mode = None
                    else:
                        with torch.inference_mode(False):  # a plain tensor, so a later pass with grad can use it
                            unit.outputs.append(out.detach().clone())
                return out
            cache = kwargs.get("cache", kwargs.get("past_key_values"))
            if cache is not None:
                placeholder = hidden_states.new_zeros(hidden_states.shape[0], self.kv_heads, hidden_states.shape[1], self.head_dim)
                cache.update(placeholder, placeholder, index)
            if not last:
                return hidden_states
            out = unit.outputs[unit.call]
            unit.call += 1
            return out

        return lower_layer


class _UnitState(threading.local):
    """The unit a thread is in: mode ("record", "replay" or None), its outputs, calls replayed."""

    def __init__(self) -> None:
        self.mode: Optional[str] = None
        self.outputs: list[torch.Tensor] = []
        self.call = 0
