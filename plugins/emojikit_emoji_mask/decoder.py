"""The two decoders: `emoji-mask` (exact constrained decoding) and `none` (validation only)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Optional

from emojikit.api import emojis
from emojikit.api.components import FormatCheck

from .automaton import EmojiAutomaton


def _count_reason(n: int, min_emoji: int, max_emoji: int) -> str:
    if n < min_emoji:
        return f"{n} emoji, fewer than min_emoji={min_emoji}"
    if n > max_emoji:
        return f"{n} emoji, more than max_emoji={max_emoji}"
    return ""


class EmojiMaskDecoder:
    """Answers of min_emoji..max_emoji emoji from an inventory, joined by a separator.

    `check` accepts exactly the strings the bound mask can produce; `bind` gives a
    `constraint.EmojiConstraint` for a tokenizer (cached in memory and, per tokenizer
    fingerprint, on disk).
    """

    def __init__(
        self,
        min_emoji: int = 2,
        max_emoji: int = 8,
        *,
        exclude_flags: bool = False,
        exclude_skin_tones: bool = False,
        exclude_keycaps: bool = False,
        separator: str = "",
        cache_dir: Optional[Path] = None,
    ):
        self.min_emoji = min_emoji
        self.max_emoji = max_emoji
        self.separator = separator
        self.inventory = emojis.inventory(exclude_flags, exclude_skin_tones, exclude_keycaps)
        self.cache_dir = cache_dir
        self._allowed = frozenset(self.inventory)
        self._automaton: Optional[EmojiAutomaton] = None
        self._bound: dict[int, tuple[Any, Any]] = {}  # id(tokenizer) -> (tokenizer, constraint)
        self._lock = threading.Lock()

    @property
    def automaton(self) -> EmojiAutomaton:
        if self._automaton is None:
            self._automaton = EmojiAutomaton(self.inventory, self.separator)
        return self._automaton

    def check(self, text: str) -> FormatCheck:
        n = self.automaton.count(text)
        if n is not None:
            reason = _count_reason(n, self.min_emoji, self.max_emoji)
            return FormatCheck(valid=not reason, n_emoji=n, reason=reason)
        return FormatCheck(valid=False, n_emoji=emojis.count(text), reason=self._why_not(text))

    def _why_not(self, text: str) -> str:
        if not text:
            return "empty answer"
        found, rest = emojis.parse(text)
        if rest:
            return f"non-emoji text {rest[:20]!r}"
        outside = [e for e in found if e not in self._allowed]
        if outside:
            return f"emoji outside the allowed inventory: {outside[0]!r}"
        at = self.automaton.longest_valid_prefix(text)
        if at == len(text):
            return "ends inside an emoji or a separator"
        return f"separator rule broken at character {at} ({text[at]!r}; separator is {self.separator!r})"

    def bind(self, tokenizer: Any):
        """The mask for this tokenizer (a policy.TokenConstraint with `allowed_batch`)."""
        with self._lock:
            hit = self._bound.get(id(tokenizer))
            if hit is not None and hit[0] is tokenizer:
                return hit[1]
            from .binding import bind_graph
            from .constraint import EmojiConstraint

            graph = bind_graph(self.automaton, tokenizer, self.cache_dir)
            constraint = EmojiConstraint(graph, self.min_emoji, self.max_emoji)
            self._bound[id(tokenizer)] = (tokenizer, constraint)
            return constraint

    def binding_report(self, model: str, export: Optional[Path] = None) -> list[tuple[str, str]]:
        """`emojikit mask`: the mask bound to MODEL's tokenizer (sizes, build times); `export`
        writes every reachable state's allowed tokens to an .npz file."""
        from .export import mask_report

        return mask_report(model, self, export)


class NoConstraintDecoder:
    """Masks nothing; `check` still reports whether a sample is emoji-only within min..max."""

    def __init__(self, min_emoji: int = 2, max_emoji: int = 8):
        self.min_emoji = min_emoji
        self.max_emoji = max_emoji

    def check(self, text: str) -> FormatCheck:
        found, rest = emojis.parse(text)
        if rest:
            return FormatCheck(valid=False, n_emoji=len(found), reason=f"non-emoji text {rest[:20]!r}")
        reason = "empty answer" if not found else _count_reason(len(found), self.min_emoji, self.max_emoji)
        return FormatCheck(valid=not reason, n_emoji=len(found), reason=reason)

    def bind(self, tokenizer: Any) -> None:
        return None
