"""The original project's mask, kept for comparison: the union of the token ids that occur
when each emoji is tokenized on its own. It is stateless, so byte fragments from different
emoji combine into characters that are not emoji (quotes, CJK, U+FFFD), and a token limit
cuts emoji in half. emojikit uses it only in tests and the benchmark, to show why."""

from __future__ import annotations

from typing import Any, Iterable, Optional, Sequence

import torch


def union_token_ids(tokenizer: Any, emoji_seqs: Iterable[str]) -> list[int]:
    ids: set[int] = set()
    for seq in emoji_seqs:
        ids.update(tokenizer.encode(seq, add_special_tokens=False))
    return sorted(ids)


class UnionMask:
    """The union mask as a TokenConstraint (one state; EOS always allowed)."""

    def __init__(self, tokenizer: Any, emoji_seqs: Iterable[str]):
        self.eos_token_id = int(tokenizer.eos_token_id)
        self.vocab_size = len(tokenizer)
        self.token_ids = union_token_ids(tokenizer, emoji_seqs)
        self._ids = torch.tensor(sorted(set(self.token_ids) | {self.eos_token_id}), dtype=torch.long)

    def start(self) -> int:
        return 0

    def advance(self, state: int, token_id: int) -> int:
        return 0

    def allowed(self, state: int, tokens_left: int, width: Optional[int] = None) -> torch.Tensor:
        mask = torch.zeros(width or self.vocab_size, dtype=torch.bool)
        mask[self._ids] = True
        return mask

    def allowed_batch(self, states: Sequence[int], tokens_left: Sequence[int], width: Optional[int] = None) -> torch.Tensor:
        return self.allowed(0, 0, width).unsqueeze(0).expand(len(states), -1).clone()
