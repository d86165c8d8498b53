"""A transformers LogitsProcessor that applies a TokenConstraint during `generate`.

It reads the tokens generate appended since the last call to advance each row's state,
so one processor serves one generate call: call `reset()` before reusing it (a call
whose input is not longer than the last one, or has another batch size, also resets it).
Use it with sampling or greedy search; beam search reorders rows and is not supported.
Masking sets disallowed logits to -inf, which temperature leaves at -inf, so the order
relative to generate's own warpers does not matter except for top-k/top-p (keep them off,
or apply the mask first).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import LogitsProcessor


class EmojiLogitsProcessor(LogitsProcessor):
    def __init__(self, constraint: Any, max_new_tokens: int):
        self.constraint = constraint
        self.max_new_tokens = max_new_tokens
        self._prompt_length = -1
        self._seen_length = -1
        self._states: list[Any] = []
        self._finished: list[bool] = []

    def reset(self) -> None:
        self._seen_length = -1

    def _begin(self, input_ids_B_T: torch.Tensor) -> None:
        self._prompt_length = input_ids_B_T.shape[1]
        self._states = [self.constraint.start()] * input_ids_B_T.shape[0]
        self._finished = [False] * input_ids_B_T.shape[0]

    def __call__(self, input_ids_B_T: torch.LongTensor, scores_B_V: torch.FloatTensor) -> torch.FloatTensor:
        length = input_ids_B_T.shape[1]
        new_call = self._seen_length < 0 or length <= self._seen_length or input_ids_B_T.shape[0] != len(self._states)
        if new_call:
            self._begin(input_ids_B_T)
        else:
            eos = self.constraint.eos_token_id
            for row, token in enumerate(input_ids_B_T[:, -1].tolist()):
                if self._finished[row]:
                    continue
                if token == eos:
                    self._finished[row] = True
                else:
                    self._states[row] = self.constraint.advance(self._states[row], token)
        self._seen_length = length
        tokens_left = self.max_new_tokens - (length - self._prompt_length)
        mask_B_V = self.constraint.allowed_batch(self._states, [tokens_left] * len(self._states), width=scores_B_V.shape[-1])
        # Finished rows only receive padding; leave them unmasked so nothing becomes NaN.
        for row, finished in enumerate(self._finished):
            if finished:
                mask_B_V[row] = True
        return scores_B_V.masked_fill(~mask_B_V.to(scores_B_V.device), float("-inf"))
