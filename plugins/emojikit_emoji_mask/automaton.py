"""A byte-level automaton over the UTF-8 bytes of an emoji inventory.

Nodes are the trie over the inventory's bytes (node 0 = ROOT: ready to start an emoji) plus
one node per byte of the separator. A *thread* is (node, completed), where `completed`
counts the emoji finished so far. Reaching a trie node that ends an emoji both keeps the
thread (a longer emoji may follow: 👨 -> 👨‍👩‍👧) and forks a thread at the boundary node
with the count raised by one, so every emoji that is a prefix of another stays reachable.

The automaton knows nothing about counts limits or tokenizers; `binding.py` adds both.
Node ids are stable for a given (inventory, separator), so bindings can be cached on disk.
"""

from __future__ import annotations

from typing import Iterable, Optional

ROOT = 0
Thread = tuple[int, int]  # (node, emoji completed so far)


class EmojiAutomaton:
    """Byte NFA for the language  emoji (separator emoji)*  over `emojis`."""

    def __init__(self, emojis: Iterable[str], separator: str = ""):
        self.emojis = tuple(emojis)
        self.separator = separator
        self.children: list[dict[int, int]] = [{}]
        self.terminal: list[bool] = [False]
        for seq in self.emojis:
            node = ROOT
            for byte in seq.encode("utf-8"):
                nxt = self.children[node].get(byte)
                if nxt is None:
                    nxt = len(self.children)
                    self.children[node][byte] = nxt
                    self.children.append({})
                    self.terminal.append(False)
                node = nxt
            self.terminal[node] = True
        self.n_trie_nodes = len(self.children)
        sep = separator.encode("utf-8")
        if sep:
            # BOUNDARY -> sep[0] -> ... -> sep[-1] -> ROOT: after an emoji the automaton sits at
            # BOUNDARY (the only accepting node); the separator leads back to ROOT.
            self.boundary = len(self.children)
            for i, byte in enumerate(sep):
                is_last = i == len(sep) - 1
                target = ROOT if is_last else len(self.children) + 1
                self.children.append({byte: target})
                self.terminal.append(False)
        else:
            self.boundary = ROOT
        self._step_cache: dict[tuple[frozenset, int], frozenset] = {}

    @property
    def n_nodes(self) -> int:
        return len(self.children)

    def step(self, threads: frozenset, byte: int) -> frozenset:
        """Threads after one more byte (count-relative: counts are whatever the caller passed)."""
        key = (threads, byte)
        cached = self._step_cache.get(key)
        if cached is not None:
            return cached
        out: set[Thread] = set()
        for node, done in threads:
            nxt = self.children[node].get(byte)
            if nxt is None:
                continue
            if self.children[nxt]:
                out.add((nxt, done))  # more bytes may follow (a longer emoji, or the separator)
            if nxt < self.n_trie_nodes and self.terminal[nxt]:
                out.add((self.boundary, done + 1))  # this emoji may end here
        result = frozenset(out)
        self._step_cache[key] = result
        return result

    def walk(self, threads: frozenset, data: bytes) -> frozenset:
        for byte in data:
            threads = self.step(threads, byte)
            if not threads:
                break
        return threads

    def count(self, text: str) -> Optional[int]:
        """Number of emoji if text is exactly emoji joined by the separator, else None.

        The inventory is uniquely decodable (tested), so at most one count accepts.
        """
        threads = self.walk(frozenset({(ROOT, 0)}), text.encode("utf-8"))
        counts = [done for node, done in threads if node == self.boundary and done > 0]
        return max(counts) if counts else None

    def longest_valid_prefix(self, text: str) -> int:
        """Characters of text the automaton can read before it dies (for error messages)."""
        threads = frozenset({(ROOT, 0)})
        for i, ch in enumerate(text):
            threads = self.walk(threads, ch.encode("utf-8"))
            if not threads:
                return i
        return len(text)
