"""The `lexicon-repair` teacher: after a miss, emoji for the target's key phrases that the
judge's wrong guess misses.

It is the lexicon teacher (same inventory, MiniLM similarities and selection) asked a smaller
question: the words of the target's key phrases that the wrong guess lacks are what the judge
did not hear, so they become the message the emoji must cover; the emoji of the
first turn are left out (sent again they add nothing a retrieval judge does not already read).
When the guess shares a word with every phrase, all phrases are used. As a plain teacher
(`answer`) it answers like `lexicon`; the repair benchmark calls `repair`.
"""

from __future__ import annotations

import re
from typing import Optional, Sequence

import numpy as np

from emojikit.api import emojis
from emojikit.api.components import BuildContext, Message
from emojikit_text.lexicon import LexiconConfig, LexiconTeacher, key_phrases

_WORDS = re.compile(r"[a-z0-9']+")


def missed_phrases(target: str, guess: str, limit: int = 7) -> list[str]:
    """The target's key phrases without the words the guess has ("cat knocked" against "a dog
    knocked over the vase" -> "cat"); every phrase when the guess has all their words."""
    phrases = key_phrases(target, limit)
    heard = set(_WORDS.findall(guess.lower()))
    missed = [" ".join(w for w in p.split() if w not in heard) for p in phrases]
    return [p for p in missed if p] or phrases


class LexiconRepairTeacher(LexiconTeacher):
    def repair(self, targets: Sequence[str], guesses: Sequence[str], first_turns: Sequence[str]) -> list[Optional[str]]:
        """A second turn per (target, wrong guess, first turn's emoji)."""
        inv = self.inventory
        index = {seq: i for i, seq in enumerate(inv.seqs)}
        by_base = {emojis.base(seq): i for i, seq in enumerate(inv.seqs)}
        queries = []
        for target, guess in zip(targets, guesses):
            missed = missed_phrases(target, guess, self.config.max_phrases)
            queries.append([", ".join(missed) if missed else target] + missed)
        flat = [q for qs in queries for q in qs]
        emb_Q_D = self.embedder.encode(flat) if flat else np.zeros((0, 1), dtype=np.float32)
        sim_Q_E = np.maximum.reduceat(emb_Q_D @ inv.text_emb_T_D.T, inv.text_owner_starts, axis=1) if flat else None
        out: list[Optional[str]] = []
        row = 0
        for target, qs, first in zip(targets, queries, first_turns):
            sim = sim_Q_E[row : row + len(qs)].copy()
            row += len(qs)
            for e in emojis.split(first or ""):
                i = index.get(e, by_base.get(emojis.base(e)))
                if i is not None:
                    sim[:, i] = -np.inf  # not again: the judge has read it
            out.append(self._select(target, sim))
        return out


def build(config: LexiconConfig, ctx: BuildContext) -> LexiconRepairTeacher:
    return LexiconRepairTeacher(config)
