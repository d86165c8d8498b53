"""Binding the emoji automaton to a tokenizer: which token moves which node where.

A token is a byte string (tokens.py); reading its bytes from an automaton node gives the
threads it can end in. Starting at ROOT and following every token, we collect the nodes a
token boundary can fall on and, for each, the edges (token, destination node, emoji
completed on the way). A token may end mid-emoji, finish one, or span several. The result
does not depend on min/max emoji (counts are applied later), so it is cached on disk per
(tokenizer fingerprint, inventory, separator).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from emojikit.api.errors import ConfigError
from emojikit.support.io import atomic_path

from .automaton import ROOT, EmojiAutomaton
from . import tokens

FORMAT_VERSION = 1
_TOKEN_END = -1  # key under which the token trie stores the ids ending at a trie node


@dataclass
class TokenGraph:
    """Token transitions between the automaton nodes a token boundary can fall on.

    Nodes are compact indices 0..N-1 (`automaton_nodes` maps them back); edges are in CSR
    order by source node.
    """

    automaton_nodes: np.ndarray  # [N] automaton node id of each compact node
    start: int  # compact index of ROOT
    boundary: int  # compact index of the accepting boundary node (-1 if unreachable)
    edge_ptr: np.ndarray  # [N+1]
    edge_token: np.ndarray  # [E] token id
    edge_dst: np.ndarray  # [E] compact destination node
    edge_delta: np.ndarray  # [E] emoji completed while reading the token
    vocab_size: int
    eos_token_id: int
    build_seconds: float = 0.0
    from_cache: bool = False

    @property
    def n_nodes(self) -> int:
        return len(self.automaton_nodes)

    @property
    def usable_tokens(self) -> int:
        """Distinct non-EOS tokens that can appear in some emoji answer."""
        return int(np.unique(self.edge_token).size)

    def save(self, path: Path) -> None:
        with atomic_path(path) as tmp, open(tmp, "wb") as f:  # readers never see a partial cache file
            np.savez(
                f,
                automaton_nodes=self.automaton_nodes,
                edge_ptr=self.edge_ptr,
                edge_token=self.edge_token,
                edge_dst=self.edge_dst,
                edge_delta=self.edge_delta,
                scalars=np.array([self.start, self.boundary, self.vocab_size, self.eos_token_id, FORMAT_VERSION], dtype=np.int64),
            )

    @classmethod
    def load(cls, path: Path) -> Optional["TokenGraph"]:
        try:
            with np.load(path) as data:
                start, boundary, vocab_size, eos, version = (int(x) for x in data["scalars"])
                if version != FORMAT_VERSION:
                    return None
                return cls(
                    automaton_nodes=data["automaton_nodes"],
                    start=start,
                    boundary=boundary,
                    edge_ptr=data["edge_ptr"],
                    edge_token=data["edge_token"],
                    edge_dst=data["edge_dst"],
                    edge_delta=data["edge_delta"],
                    vocab_size=vocab_size,
                    eos_token_id=eos,
                    from_cache=True,
                )
        except (OSError, KeyError, ValueError):
            return None  # a missing or unreadable cache is rebuilt


def _token_trie(token_bytes: Sequence[Optional[bytes]], alphabet: set[int]) -> dict:
    """A trie over the byte strings of the tokens that use only bytes the automaton reads."""
    root: dict = {}
    for token_id, data in enumerate(token_bytes):
        if not data or not alphabet.issuperset(data):
            continue
        node = root
        for byte in data:
            node = node.setdefault(byte, {})
        node.setdefault(_TOKEN_END, []).append(token_id)
    return root


def build_graph(automaton: EmojiAutomaton, token_bytes: Sequence[Optional[bytes]], eos_token_id: int) -> TokenGraph:
    """Follow every token from ROOT and from every node a token can end at."""
    started = time.perf_counter()
    alphabet = {byte for children in automaton.children for byte in children}
    trie = _token_trie(token_bytes, alphabet)
    children = automaton.children
    index = {ROOT: 0}
    order = [ROOT]
    src: list[int] = []
    tok: list[int] = []
    dst: list[int] = []
    delta: list[int] = []
    i = 0
    while i < len(order):
        # Depth-first over the token trie, reading bytes from order[i]; a branch stops as soon
        # as no thread survives, so only tokens that fit the emoji bytes are visited.
        stack = [(trie, frozenset({(order[i], 0)}))]
        while stack:
            trie_node, threads = stack.pop()
            readable = {byte for node, _ in threads for byte in children[node]}
            for byte in readable:
                child = trie_node.get(byte)
                if child is None:
                    continue
                nxt = automaton.step(threads, byte)
                if not nxt:
                    continue
                ids = child.get(_TOKEN_END)
                if ids:
                    for node, done in nxt:
                        j = index.get(node)
                        if j is None:
                            j = index[node] = len(order)
                            order.append(node)
                        for token_id in ids:
                            src.append(i)
                            tok.append(token_id)
                            dst.append(j)
                            delta.append(done)
                if len(child) > (1 if ids else 0):
                    stack.append((child, nxt))
        i += 1
    src_E = np.asarray(src, dtype=np.int64)
    by_src = np.argsort(src_E, kind="stable")
    edge_ptr = np.zeros(len(order) + 1, dtype=np.int64)
    np.add.at(edge_ptr, src_E + 1, 1)
    return TokenGraph(
        automaton_nodes=np.asarray(order, dtype=np.int64),
        start=0,
        boundary=index.get(automaton.boundary, -1),
        edge_ptr=np.cumsum(edge_ptr),
        edge_token=np.asarray(tok, dtype=np.int64)[by_src],
        edge_dst=np.asarray(dst, dtype=np.int64)[by_src],
        edge_delta=np.asarray(delta, dtype=np.int64)[by_src],
        vocab_size=len(token_bytes),
        eos_token_id=eos_token_id,
        build_seconds=time.perf_counter() - started,
    )


def inventory_key(emojis: Sequence[str], separator: str) -> str:
    digest = hashlib.sha256("\n".join(emojis).encode("utf-8"))
    digest.update(b"\x00" + separator.encode("utf-8"))
    return digest.hexdigest()[:16]


def eos_id(tokenizer: Any) -> int:
    eos = getattr(tokenizer, "eos_token_id", None)
    if eos is None:
        raise ConfigError(f"tokenizer {type(tokenizer).__name__} has no eos_token_id; the emoji mask needs one to end answers")
    return int(eos)


def bind_graph(
    automaton: EmojiAutomaton,
    tokenizer: Any,
    cache_dir: Optional[Path] = None,
) -> TokenGraph:
    """The token graph for this tokenizer, from the disk cache when it was built before."""
    started = time.perf_counter()
    spec_text = tokens.tokenizer_spec_text(tokenizer)
    eos = eos_id(tokenizer)
    path = None
    if cache_dir is not None:
        key = f"{tokens.fingerprint(tokenizer, spec_text)}-{inventory_key(automaton.emojis, automaton.separator)}"
        path = Path(cache_dir) / f"emoji-mask-{key}-v{FORMAT_VERSION}.npz"
        cached = TokenGraph.load(path)
        if cached is not None and cached.eos_token_id == eos:
            cached.build_seconds = time.perf_counter() - started
            return cached
    graph = build_graph(automaton, tokens.token_bytes(tokenizer, spec_text), eos)
    if path is not None:
        graph.save(path)
    graph.build_seconds = time.perf_counter() - started
    return graph
